#include "core/plugin/plugin_library.h"

#include <elf.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "core/common/logging.h"
#include "core/plugin/abi_table.h"
#include "core/plugin/plugin_error.h"
#include "core/plugin/plugin_kind.h"

namespace pagedllm {

namespace fs = std::filesystem;

std::string_view plugin_kind_name(pllm_plugin_kind kind) {
  switch (kind) {
    case PLLM_PLUGIN_KIND_ATTENTION: return "attention";
    case PLLM_PLUGIN_KIND_MODEL: return "model";
    case PLLM_PLUGIN_KIND_SAMPLER: return "sampler";
    case PLLM_PLUGIN_KIND_SPECULATOR: return "speculator";
    case PLLM_PLUGIN_KIND_COLLECTIVES: return "collectives";
    case PLLM_PLUGIN_KIND_CONSTRAINT: return "constraint";
    case PLLM_PLUGIN_KIND_INVALID: return "invalid";
    case PLLM_PLUGIN_KIND_FORCE_32BIT: break;
  }
  return "unknown";
}

namespace {

// Whether a plugin's struct has every field SDK 2.0 defined: the smallest a
// plugin of this major may declare. Later minors append fields after these,
// which PLLM_HAS_FIELD finds absent in an older plugin's struct; the last 2.0
// field named here never changes within the major.
bool has_2_0_fields(const pllm_plugin_descriptor& d) { return PLLM_HAS_FIELD(pllm_plugin_descriptor, &d, kind_api); }
bool has_2_0_fields(const pllm_attention_api& t) { return PLLM_HAS_FIELD(pllm_attention_api, &t, memory_info); }
bool has_2_0_fields(const pllm_model_api& t) { return PLLM_HAS_FIELD(pllm_model_api, &t, get_tensor); }
bool has_2_0_fields(const pllm_sampler_api& t) { return PLLM_HAS_FIELD(pllm_sampler_api, &t, probabilities); }
bool has_2_0_fields(const pllm_speculator_api& t) { return PLLM_HAS_FIELD(pllm_speculator_api, &t, verify); }
// A kind added after 2.0 needs the slots of the minor that introduced it (collectives: 2.1).
bool has_2_0_fields(const pllm_collectives_api& t) { return PLLM_HAS_FIELD(pllm_collectives_api, &t, barrier); }
// The constraint kind came with 2.1: every constraint plugin has at least 2.1's slots.
bool has_2_0_fields(const pllm_constraint_api& t) { return PLLM_HAS_FIELD(pllm_constraint_api, &t, is_terminated); }

#if defined(__x86_64__)
constexpr Elf64_Half kHostElfMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr Elf64_Half kHostElfMachine = EM_AARCH64;
#else
#error "unsupported architecture: add its ELF machine here"
#endif

[[noreturn]] void refuse(const fs::path& file, const std::string& message) {
  throw PluginLoadError(fmt::format("{}: {}", file.string(), message));
}

// dlopen's messages for these cases ("invalid ELF header", "cannot dynamically
// load position-independent executable") are cryptic; say it plainly.
void require_elf_shared_object(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) refuse(file, "no such file");
  if (!fs::is_regular_file(file, ec)) refuse(file, "not a regular file");
  const std::string how_to = ". A plugin is a .so built with pagedllm_add_plugin() (see sdk/README.md)";
  std::ifstream in(file, std::ios::binary);
  Elf64_Ehdr header{};
  in.read(reinterpret_cast<char*>(&header), sizeof header);
  const bool elf = in.gcount() == sizeof header && std::memcmp(header.e_ident, ELFMAG, SELFMAG) == 0;
  if (!elf) refuse(file, "not a plugin: the file is not an ELF shared object" + how_to);
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_machine != kHostElfMachine) {
    refuse(file, "not a plugin for this machine: it is an ELF file for another architecture" + how_to);
  }
  if (header.e_type != ET_DYN) {
    refuse(file, "not a plugin: the file is an ELF file but not an ELF shared object" + how_to);
  }
  // A position-independent executable is ET_DYN too; it asks for a program interpreter.
  for (int i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment{};
    in.seekg(static_cast<std::streamoff>(header.e_phoff + static_cast<std::uint64_t>(i) * header.e_phentsize));
    in.read(reinterpret_cast<char*>(&segment), sizeof segment);
    if (in.gcount() != sizeof segment) break;
    if (segment.p_type == PT_INTERP) {
      refuse(file, "not a plugin: the file is an executable program, not an ELF shared object" + how_to);
    }
  }
}

// The plugin's table in the host's layout. Refuses a table without SDK 2.0's
// slots: no plugin of this major can have one.
template <class Api>
Api normalised_table(const fs::path& file, const std::string& name, const void* raw) {
  if (!raw) refuse(file, fmt::format("plugin '{}' has no function table", name));
  const Api table = pad_table_to_host_layout<Api>(raw);
  if (!has_2_0_fields(table)) {
    refuse(file, fmt::format("plugin '{}' declares a function table of {} bytes, too small for the slots "
                             "SDK {}.0 defines: it is corrupt or was not built with the pagedllm SDK. "
                             "Rebuild it against SDK {}",
                             name, table.struct_size, kHostSdkVersion.major, kHostSdkVersion.str()));
  }
  return table;
}

void require_slots(const fs::path& file, const std::string& name,
                   std::initializer_list<std::pair<const char*, bool>> slots) {
  for (const auto& [slot, present] : slots) {
    if (!present) refuse(file, fmt::format("plugin '{}' leaves the required function '{}' unset", name, slot));
  }
}

}  // namespace

PluginLibrary::PluginLibrary(fs::path file, boost::dll::shared_library library)
    : file_(std::move(file)), library_(std::move(library)) {}

PluginLibrary::~PluginLibrary() {
  if (initialised_ && descriptor_->shutdown) descriptor_->shutdown();
}

std::shared_ptr<PluginLibrary> PluginLibrary::load(const fs::path& file, SdkVersion host_sdk) {
  require_elf_shared_object(file);

  boost::dll::shared_library library;
  try {
    // RTLD_LOCAL: two plugins never resolve symbols against each other.
    library.load(file, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    refuse(file, fmt::format("cannot be loaded: {}. Check that it was built for this machine and "
                             "that the libraries it needs are installed (ldd {})",
                             e.what(), file.string()));
  }
  if (!library.has(PLLM_PLUGIN_ENTRY_SYMBOL)) {
    refuse(file, "not a pagedllm plugin: it does not export '" PLLM_PLUGIN_ENTRY_SYMBOL
                 "'. Export the plugin with PAGEDLLM_PLUGIN(...) from <pagedllm/sdk.hpp>");
  }
  auto entry = library.get<const pllm_plugin_descriptor*()>(PLLM_PLUGIN_ENTRY_SYMBOL);

  std::shared_ptr<PluginLibrary> plugin(new PluginLibrary(file, std::move(library)));
  const pllm_plugin_descriptor* d = entry();
  if (!d) refuse(file, "'" PLLM_PLUGIN_ENTRY_SYMBOL "' returned no descriptor");
  // Every major so far starts its descriptor with struct_size, the SDK version,
  // kind and name, so a plugin of another major (1.x) is named as such before
  // the rest of its layout is judged.
  if (!PLLM_HAS_FIELD(pllm_plugin_descriptor, d, name)) {
    refuse(file, fmt::format("its descriptor is {} bytes, too small to hold its SDK version and name: it is "
                             "corrupt or was not built with the pagedllm SDK",
                             d->struct_size));
  }
  const std::string name = d->name ? d->name : "";
  if (name.empty()) refuse(file, "its descriptor has no name");
  const SdkVersion plugin_sdk{d->sdk_major, d->sdk_minor};
  if (plugin_sdk.major != host_sdk.major) {
    refuse(file, fmt::format("plugin '{}' was built against pagedllm SDK {}, but this host implements "
                             "SDK {}; a host loads only plugins of its own major version {}. Rebuild "
                             "the plugin against SDK {}.x (the headers installed with this host)",
                             name, plugin_sdk.str(), host_sdk.str(), host_sdk.major, host_sdk.major));
  }
  if (plugin_sdk.minor > host_sdk.minor) {
    refuse(file, fmt::format("plugin '{}' was built against pagedllm SDK {}, newer than this host's SDK "
                             "{}; a host loads plugins of SDK {}.0 to {}. Upgrade the host to SDK {} or "
                             "later, or rebuild the plugin against SDK {}",
                             name, plugin_sdk.str(), host_sdk.str(), host_sdk.major, host_sdk.str(),
                             plugin_sdk.str(), host_sdk.str()));
  }
  if (!has_2_0_fields(*d)) {
    refuse(file, fmt::format("plugin '{}': its descriptor is {} bytes, too small for the fields SDK {}.0 "
                             "defines: it is corrupt or was not built with the pagedllm SDK",
                             name, d->struct_size, host_sdk.major));
  }
  if (!d->version) refuse(file, fmt::format("plugin '{}' has no version", name));
  if (!d->init || !d->validate_options) {
    refuse(file, fmt::format("plugin '{}' leaves init or validate_options unset", name));
  }

  switch (d->kind) {
    case PLLM_PLUGIN_KIND_ATTENTION: {
      auto t = normalised_table<pllm_attention_api>(file, name, d->kind_api);
      require_slots(file, name, {{"create", t.create}, {"destroy", t.destroy},
                                 {"bytes_per_block", t.bytes_per_block}, {"allocate_cache", t.allocate_cache},
                                 {"plan", t.plan}, {"run", t.run}, {"swap_out", t.swap_out},
                                 {"swap_in", t.swap_in}, {"copy_blocks", t.copy_blocks}});
      plugin->table_ = t;
      break;
    }
    case PLLM_PLUGIN_KIND_MODEL: {
      auto t = normalised_table<pllm_model_api>(file, name, d->kind_api);
      require_slots(file, name, {{"create", t.create}, {"destroy", t.destroy},
                                 {"get_info", t.get_info}, {"forward", t.forward}});
      plugin->table_ = t;
      break;
    }
    case PLLM_PLUGIN_KIND_SAMPLER: {
      auto t = normalised_table<pllm_sampler_api>(file, name, d->kind_api);
      require_slots(file, name, {{"create", t.create}, {"destroy", t.destroy}, {"sample", t.sample}});
      plugin->table_ = t;
      break;
    }
    case PLLM_PLUGIN_KIND_SPECULATOR: {
      auto t = normalised_table<pllm_speculator_api>(file, name, d->kind_api);
      require_slots(file, name, {{"create", t.create}, {"destroy", t.destroy}, {"get_info", t.get_info},
                                 {"draft", t.draft}, {"verify", t.verify}});
      plugin->table_ = t;
      break;
    }
    case PLLM_PLUGIN_KIND_COLLECTIVES: {
      auto t = normalised_table<pllm_collectives_api>(file, name, d->kind_api);
      require_slots(file, name, {{"create", t.create}, {"destroy", t.destroy}, {"get_info", t.get_info},
                                 {"all_reduce", t.all_reduce}, {"all_gather", t.all_gather},
                                 {"broadcast", t.broadcast}, {"barrier", t.barrier}});
      plugin->table_ = t;
      break;
    }
    case PLLM_PLUGIN_KIND_CONSTRAINT: {
      auto t = normalised_table<pllm_constraint_api>(file, name, d->kind_api);
      require_slots(file, name, {{"create", t.create}, {"destroy", t.destroy}, {"compile", t.compile},
                                 {"release_grammar", t.release_grammar}, {"create_matcher", t.create_matcher},
                                 {"destroy_matcher", t.destroy_matcher}, {"fill_bitmask", t.fill_bitmask},
                                 {"accept_token", t.accept_token}, {"rollback", t.rollback},
                                 {"is_terminated", t.is_terminated}});
      plugin->table_ = t;
      break;
    }
    case PLLM_PLUGIN_KIND_INVALID:
      refuse(file, fmt::format("plugin '{}' declares no kind", name));
    case PLLM_PLUGIN_KIND_FORCE_32BIT:
      break;  // never a kind: refused below like any value this host does not know
  }
  if (std::holds_alternative<std::monostate>(plugin->table_)) {
    refuse(file, fmt::format("plugin '{}' declares an unknown kind {}", name, static_cast<int>(d->kind)));
  }

  plugin->descriptor_ = d;
  plugin->host_services_ = std::make_unique<HostServices>(name);
  pllm_error error{};
  const pllm_status status = d->init(plugin->host_services_->api(), &error);
  if (status != PLLM_OK) {
    refuse(file, fmt::format("plugin '{}' failed to initialise ({}): {}", name, pllm_status_name(status),
                             error.message));
  }
  plugin->initialised_ = true;
  host_log().debug("loaded plugin '{}' {} ({} plugin, SDK {}) from {}", name, d->version,
                   plugin_kind_name(d->kind), plugin_sdk.str(), file.string());
  return plugin;
}

}  // namespace pagedllm
