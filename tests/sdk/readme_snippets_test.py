"""Compiles every code block of sdk/README.md against the installed SDK, so the README cannot drift.

Each ```cpp, ```c and ```cmake block must be preceded by a marker line
    <!-- snippet: FILE -->            the block is FILE of one scratch project
    <!-- snippet: FILE, wrapper: W --> FILE is tests/sdk/readme_snippets/W with the block in place of its
                                       line "// @SNIPPET@" (or, without that line, the block then W)
The CMakeLists.txt block is the project; every other C/C++ file is compiled into an object library
added to it. The project is configured and built against the SDK installed from the build tree
(cmake --install --component sdk), and each plugin it builds is loaded by `pagedllm-host --check`.

Usage: readme_snippets_test.py <source dir> <build dir>
"""
import os
import re
import subprocess
import sys
import tempfile

COMPILED_LANGUAGES = {"cpp", "c", "cmake"}
MARKER = re.compile(r"<!--\s*snippet:\s*([^,\s]+)\s*(?:,\s*wrapper:\s*(\S+)\s*)?-->")


def blocks(readme):
    """(language, marker match or None, code, line number) of every fenced block."""
    lines = open(readme, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        language, start = fence.group(1), i
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        previous = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        yield language, MARKER.search(previous), "\n".join(lines[start + 1:j]) + "\n", start + 1
        i = j + 1


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        sys.exit(f"FAIL: {' '.join(command)}\n{result.stdout}{result.stderr}")
    return result.stdout


def main():
    source_dir, build_dir = (os.path.abspath(p) for p in sys.argv[1:3])
    readme = os.path.join(source_dir, "sdk", "README.md")
    wrappers = os.path.join(source_dir, "tests", "sdk", "readme_snippets")
    with tempfile.TemporaryDirectory() as work:
        project = os.path.join(work, "project")
        os.makedirs(project)
        files = {}
        for language, marker, code, line in blocks(readme):
            if language not in COMPILED_LANGUAGES:
                continue
            if not marker:
                sys.exit(f"FAIL: sdk/README.md:{line}: a ```{language} block without a '<!-- snippet: FILE -->' "
                         "marker line before it (tests/sdk/readme_snippets_test.py says how to add one)")
            name, wrapper = marker.group(1), marker.group(2)
            if name in files:
                sys.exit(f"FAIL: sdk/README.md:{line}: a second block named {name}")
            if wrapper:
                text = open(os.path.join(wrappers, wrapper), encoding="utf-8").read()
                code = text.replace("// @SNIPPET@\n", code) if "// @SNIPPET@\n" in text else code + "\n" + text
            files[name] = code
            print(f"sdk/README.md:{line}: ```{language} block -> {name}" + (f" (wrapper {wrapper})" if wrapper else ""))
        if "CMakeLists.txt" not in files:
            sys.exit("FAIL: sdk/README.md has no ```cmake block named CMakeLists.txt (the project)")
        fragments = sorted(name for name in files if name != "CMakeLists.txt" and
                           name not in re.findall(r"[\w.]+\.(?:cpp|c)\b", files["CMakeLists.txt"]))
        if fragments:
            files["CMakeLists.txt"] += ("\n# Added by the test: the README's other code, compiled.\n"
                                        f"add_library(readme_fragments OBJECT {' '.join(fragments)})\n"
                                        "target_link_libraries(readme_fragments PRIVATE PagedLLM::sdk)\n")
        for name, code in files.items():
            with open(os.path.join(project, name), "w", encoding="utf-8") as f:
                f.write(code)

        prefix = os.path.join(work, "prefix")
        run(["cmake", "--install", build_dir, "--component", "sdk", "--prefix", prefix])
        env = {k: v for k, v in os.environ.items() if k not in ("CXXFLAGS", "CFLAGS", "LDFLAGS")}
        out = os.path.join(work, "build")
        run(["cmake", "-S", project, "-B", out, "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}",
             "-DCMAKE_COMPILE_WARNING_AS_ERROR=ON", "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Wpedantic"], env=env)
        run(["cmake", "--build", out], env=env)
        plugins = sorted(f for f in os.listdir(out) if f.endswith(".so"))
        if not plugins:
            sys.exit("FAIL: the README's project built no plugin")
        host = os.path.join(build_dir, "bin", "pagedllm-host")
        config = os.path.join(source_dir, "configs", "tiny.yaml")
        for plugin in plugins:
            # The README's YAML gives my_attention {variant: exact}: its Options must accept that.
            check = run([host, "--config", config, "--check", "--log-level", "warn",
                         "--set", f"attention.plugin={os.path.join(out, plugin)}",
                         "--set", "attention.options={variant: exact}"])
            print(next(line for line in check.splitlines() if plugin[:-3] + " " in line))
        print(f"{len(files)} files from sdk/README.md built; {len(plugins)} plugin(s) loaded")


if __name__ == "__main__":
    main()
