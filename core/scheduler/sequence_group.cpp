#include "core/scheduler/sequence_group.h"

#include <utility>

namespace pagedllm {

int SequenceGroup::num_reserved_sequences() const {
  // A beam group keeps its width whatever its beams do.
  if (!forked || request.beam_search) return request.n;
  int live = 0;
  for (const Sequence& sequence : sequences) {
    if (!sequence.finished()) ++live;
  }
  return live;
}

std::vector<SequenceId> SequenceGroup::live_sequence_ids() const {
  std::vector<SequenceId> ids;
  for (const Sequence& sequence : sequences) {
    if (!sequence.finished()) ids.push_back(sequence.id);
  }
  return ids;
}

Sequence* SequenceGroup::find_sequence(SequenceId id) {
  return const_cast<Sequence*>(std::as_const(*this).find_sequence(id));
}

const Sequence* SequenceGroup::find_sequence(SequenceId id) const {
  for (const Sequence& sequence : sequences) {
    if (sequence.id == id) return &sequence;
  }
  return nullptr;
}

bool SequenceGroup::is_decoding() const {
  for (const Sequence& sequence : sequences) {
    if (sequence.finished()) continue;
    if (sequence.num_tokens() == prompt_len() || sequence.num_uncomputed_tokens() != 1) {
      return false;
    }
  }
  return true;
}

bool SequenceGroup::all_finished() const {
  for (const Sequence& sequence : sequences) {
    if (!sequence.finished()) return false;
  }
  return true;
}

}  // namespace pagedllm
