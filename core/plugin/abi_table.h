#pragma once
// How the host reads a plugin's function table across minor versions: it
// copies the bytes the plugin declared (struct_size) into a zeroed table of
// the host's own layout. Slots appended in minors newer than the plugin's then
// read as NULL, exactly like optional slots the plugin left unset.

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace pagedllm {

template <class Api>
Api pad_table_to_host_layout(const void* plugin_table) {
  std::uint32_t declared = 0;
  std::memcpy(&declared, plugin_table, sizeof declared);  // struct_size is every table's first field
  Api table{};
  std::memcpy(static_cast<void*>(&table), plugin_table, std::min<std::size_t>(declared, sizeof(Api)));
  return table;
}

}  // namespace pagedllm
