#!/usr/bin/env python3
"""No read of the host can throw (docs/DEVELOPING.md, "Reading host files"), checked in the C++
sources of server/ and client/ (not tests/):

  everywhere in server/ and client/
    - std::istreambuf_iterator: it calls the stream buffer directly, so a failed read (ESRCH from
      /proc/<pid>/stat of a process that just ended) throws std::ios_base::failure out of it;
    - a stream's exceptions(...): it makes any stream read throw;
  in server/ (its reads go through ReadHostFile, server/common/host_file.h)
    - std::ifstream, std::fstream, std::basic_ifstream, std::basic_fstream, fopen(, freopen(:
      reads outside the bounded, regular-files-only reader;
    - a std::filesystem query (exists, is_directory, status, directory_iterator, ...) without a
      std::error_code argument: those overloads throw std::filesystem::filesystem_error on
      EACCES, ENAMETOOLONG, ... (devplaced --host_root=<5,000 characters> aborted).

Comments and string literals are not read. Each hit is printed as path:line: the rule; exit 1 on
any. Usage: no_throwing_host_reads.py SOURCE_DIR
"""
import os
import re
import sys

EVERYWHERE = [
    (re.compile(r"\bistreambuf_iterator\b"),
     "std::istreambuf_iterator throws out of a failed read; use ReadHostFile (server/common/host_file.h) "
     "or the client's bounded reader"),
    (re.compile(r"(\.|->)\s*exceptions\s*\("),
     "a stream's exceptions() makes its reads throw; check the stream's state or use a Status-returning reader"),
]
SERVER_ONLY = [
    (re.compile(r"\bstd::(basic_)?i?fstream\b|\b(std::)?f(re)?open\s*\("),
     "server code reads files through ReadHostFile (server/common/host_file.h): bounded, regular files only, "
     "a Status on failure"),
]
FS_QUERIES = ("exists|is_directory|is_regular_file|is_symlink|is_fifo|is_socket|is_empty|status|symlink_status|"
              "file_size|read_symlink|canonical|weakly_canonical|equivalent|last_write_time|space|hard_link_count|"
              "directory_iterator|recursive_directory_iterator|create_directory|create_directories|remove|"
              "remove_all|rename|copy|copy_file|resize_file|permissions")
FS_CALL = re.compile(r"\bstd::filesystem::(" + FS_QUERIES + r")\b\s*(?:[A-Za-z_]\w*\s*)?\(")
ERROR_CODE_DECL = re.compile(r"\bstd::error_code\s+([A-Za-z_]\w*)")
SOURCE = re.compile(r"\.(cc|h|cpp|hpp)$")


def strip(text):
    """`text` with comments and the contents of string and character literals blanked out, so
    line numbers and columns stay."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else text[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def call_arguments(code, open_paren):
    """The top-level arguments of the call whose '(' is at `open_paren`."""
    depth, start, args = 0, open_paren + 1, []
    for j in range(open_paren, len(code)):
        ch = code[j]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append(code[start:j].strip())
                return [a for a in args if a]
        elif ch == "," and depth == 1:
            args.append(code[start:j].strip())
            start = j + 1
    return args


def check(path, rel, text):
    code = strip(text)
    problems = []

    def line_of(offset):
        return code.count("\n", 0, offset) + 1

    rules = EVERYWHERE + (SERVER_ONLY if rel.startswith("server/") else [])
    for pattern, why in rules:
        for m in pattern.finditer(code):
            problems.append(f"{rel}:{line_of(m.start())}: {why}")
    if rel.startswith("server/"):
        error_codes = set(ERROR_CODE_DECL.findall(code))
        for m in FS_CALL.finditer(code):
            args = call_arguments(code, m.end() - 1)
            if args and not any(a in error_codes for a in args):  # no arguments: an end iterator
                problems.append(f"{rel}:{line_of(m.start())}: std::filesystem::{m.group(1)} without a "
                                "std::error_code argument throws on EACCES, ENAMETOOLONG, ...; pass one")
    return sorted(problems, key=lambda p: int(p.split(":")[1]))


# The checker checked first: each sample must give exactly the hits listed (rule words), so a
# pattern that stopped matching fails the test rather than passing everything.
SAMPLES = [
    ("server/x.cc", 'std::ifstream in(p);\nstd::string s((std::istreambuf_iterator<char>(in)), {});\n',
     [":1: server code reads files", ":2: std::istreambuf_iterator throws"]),
    ("client/x.cc", "std::ifstream in(p);\nin.exceptions(std::ios::badbit);\n", [":2: a stream's exceptions()"]),
    ("server/x.cc", "FILE* f = fopen(p, \"r\");\n", [":1: server code reads files"]),
    ("server/x.cc", "if (std::filesystem::is_directory(p)) {}\n", [":1: std::filesystem::is_directory without"]),
    ("server/x.cc", "std::error_code ec;\nif (std::filesystem::is_directory(f(a, b), ec)) {}\n"
     "for (std::filesystem::directory_iterator it(d, ec); it != std::filesystem::directory_iterator(); it.increment(ec)) {}\n",
     []),
    ("server/x.cc", "// std::istreambuf_iterator in a comment\nconst char* s = \"in.exceptions(x)\";\n"
     "/* std::ifstream */ auto p = std::filesystem::path(q).parent_path();\n", []),
]


def self_test():
    failures = []
    for rel, text, want in SAMPLES:
        got = check(rel, rel, text)
        if len(got) != len(want) or not all(w in g for w, g in zip(want, got)):
            failures.append(f"sample {text!r} in {rel}: got {got}, want hits naming {want}")
    return failures


def main():
    root = sys.argv[1]
    failures = self_test()
    if failures:
        print("the checker itself is broken:\n" + "\n".join(failures))
        return 1
    problems = []
    files = 0
    for top in ("server", "client"):
        for folder, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not SOURCE.search(name):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8", errors="replace") as f:
                    problems += check(path, rel, f.read())
                files += 1
    if problems:
        print("reads of the host that can throw (docs/DEVELOPING.md, \"Reading host files\"):")
        print("\n".join(problems))
        return 1
    print(f"{files} C++ files under server/ and client/: no istreambuf_iterator, no stream exceptions(); "
          "server/ reads through ReadHostFile and passes a std::error_code to std::filesystem queries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
