#include "core/plugin/plugin_library.h"

#include <dlfcn.h>
#include <elf.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string_view>
#include <utility>
#include <vector>

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

template <class T>
bool read_at(std::ifstream& in, std::uint64_t offset, T& out) {
  in.clear();
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(reinterpret_cast<char*>(&out), sizeof out);
  return in.gcount() == sizeof out;
}

// The bytes of `section`, at most 64 MiB (a string table; empty when it cannot be read).
std::string section_bytes(std::ifstream& in, const Elf64_Shdr& section) {
  if (section.sh_type == SHT_NOBITS || section.sh_size > (std::uint64_t(64) << 20)) return {};
  std::string bytes(section.sh_size, '\0');
  in.clear();
  in.seekg(static_cast<std::streamoff>(section.sh_offset));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return in.gcount() == static_cast<std::streamsize>(bytes.size()) ? bytes : std::string();
}

std::string_view string_at(const std::string& table, std::uint64_t offset) {
  if (offset >= table.size()) return {};
  const std::string_view rest = std::string_view(table).substr(offset);
  return rest.substr(0, rest.find('\0'));
}

// Whether the shared object at `file` carries CUDA device code or links a library that does:
// a .nv_fatbin section (what nvcc puts kernels in, whichever cudart the object links), or a
// DT_NEEDED entry naming the CUDA runtime, the driver, cuBLAS, NCCL, or the emulator that stands
// in for cudart and cuBLAS in the emulated build (so CI loads plugins as a GPU machine does).
// Read from the section headers; an object without them reads as carrying none.
bool links_cuda(const fs::path& file) {
  constexpr std::string_view kCudaLibraries[] = {"libcudart.so", "libcuda.so",  "libcublas.so",
                                                 "libcublasLt.so", "libnccl.so", "libpagedllm_cuda_emulation.so"};
  std::ifstream in(file, std::ios::binary);
  Elf64_Ehdr header{};
  if (!read_at(in, 0, header) || header.e_shoff == 0 || header.e_shentsize != sizeof(Elf64_Shdr)) return false;
  Elf64_Shdr first{};
  if (!read_at(in, header.e_shoff, first)) return false;
  // Past SHN_LORESERVE sections the counts live in section 0 (ELF's extended numbering).
  const std::uint64_t count = header.e_shnum != 0 ? header.e_shnum : first.sh_size;
  const std::uint64_t names_index = header.e_shstrndx != SHN_XINDEX ? header.e_shstrndx : first.sh_link;
  if (count > 0x10000 || names_index >= count) return false;
  std::vector<Elf64_Shdr> sections(count);
  for (std::uint64_t i = 0; i < count; ++i) {
    if (!read_at(in, header.e_shoff + i * sizeof(Elf64_Shdr), sections[i])) return false;
  }
  const std::string names = section_bytes(in, sections[names_index]);
  for (const Elf64_Shdr& section : sections) {
    if (string_at(names, section.sh_name) == ".nv_fatbin") return true;
    if (section.sh_type != SHT_DYNAMIC || section.sh_link >= count) continue;
    const std::string strings = section_bytes(in, sections[section.sh_link]);
    for (std::uint64_t at = 0; at + sizeof(Elf64_Dyn) <= section.sh_size; at += sizeof(Elf64_Dyn)) {
      Elf64_Dyn entry{};
      if (!read_at(in, section.sh_offset + at, entry) || entry.d_tag == DT_NULL) break;
      if (entry.d_tag != DT_NEEDED) continue;
      const std::string_view needed = string_at(strings, entry.d_un.d_val);
      for (const std::string_view cuda : kCudaLibraries) {
        if (needed.starts_with(cuda)) return true;
      }
    }
  }
  return false;
}

// Keeps the library at `file`, which was just loaded, mapped until the process exits, and with it
// everything it links. Why: unloading a library with CUDA code and loading it again, in a process
// whose CUDA runtime and driver stay, is what crashed on an H100. Mapping it registers its device code (nvcc's
// __cudaRegisterFatBinary, from a constructor) and unmapping it unregisters the code. In a static-cudart
// build, the library's own runtime is loaded and unloaded with it. The CUDA libraries it pulls in are
// loaded and unloaded with it too: cuBLAS (with a static cudart of its own), NCCL. On an H100
// (docs/gpu-validation.md, 2026-11-26) test_engine_cuda's CPU engine loaded models_llama.so (in a
// CUDA build it also holds the CUDA forward and links cudart and cuBLAS) and the sampler, and unloaded
// them when it was destroyed. The CUDA engine that loaded them again then died with SIGSEGV while
// uploading its weights, right after "loading weights: 0%", where models_llama launches its first
// kernel. That happened with cudart linked static and with cudart linked shared. Under the emulator,
// which registers no device code, it never happens. So the library is pinned: a second dlopen with
// RTLD_NODELETE (glibc lets RTLD_NOLOAD add flags to a loaded object). The next engine then finds it
// mapped: its code is registered once, its CUDA libraries loaded once, and its init() runs again
// over the statics its shutdown() left. Plugins without CUDA unload as before.
// PAGEDLLM_UNLOAD_CUDA_PLUGINS=1 turns the pinning off; it is only for the GPU diagnostic
// (tools/gpu/validate.sh's crash stage), which runs the crash with the pinning and without it.
bool keep_loaded_if_cuda(const fs::path& file) {
  if (!links_cuda(file)) return false;
  const char* off = std::getenv("PAGEDLLM_UNLOAD_CUDA_PLUGINS");
  if (off != nullptr && std::string_view(off) == "1") return false;
  void* pinned = dlopen(file.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  if (pinned == nullptr) {
    const char* error = dlerror();
    host_log().warn("{}: links CUDA but could not be kept loaded ({}); it unloads with its last user",
                    file.string(), error ? error : "not loaded");
    return false;
  }
  // The reference this took is given back: RTLD_NODELETE outlives it.
  dlclose(pinned);
  return true;
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
  // At once: its constructors have registered its device code already, and a refusal below would
  // otherwise unload it again.
  const bool kept_loaded = keep_loaded_if_cuda(file);
  if (!library.has(PLLM_PLUGIN_ENTRY_SYMBOL)) {
    refuse(file, "not a pagedllm plugin: it does not export '" PLLM_PLUGIN_ENTRY_SYMBOL
                 "'. Export the plugin with PAGEDLLM_PLUGIN(...) from <pagedllm/sdk.hpp>");
  }
  auto entry = library.get<const pllm_plugin_descriptor*()>(PLLM_PLUGIN_ENTRY_SYMBOL);

  std::shared_ptr<PluginLibrary> plugin(new PluginLibrary(file, std::move(library)));
  plugin->kept_loaded_ = kept_loaded;
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
  host_log().debug("loaded plugin '{}' {} ({} plugin, SDK {}) from {}{}", name, d->version,
                   plugin_kind_name(d->kind), plugin_sdk.str(), file.string(),
                   kept_loaded ? " (links CUDA: kept loaded until the process exits)" : "");
  return plugin;
}

}  // namespace pagedllm
