"""Generate cffi declarations from llama.cpp's installed headers.

Nothing here knows what llama.h contains: the C preprocessor expands the
headers, only the lines that came from llama.cpp's own headers are kept, and
the few constructs cffi's parser cannot read are rewritten so that the C
compiler fills them in (cffi API mode's ``...``):

* every enum keeps its member names and lets the compiler give the values
  (cffi rejects computed values such as ``1 << 3``);
* array sizes that are expressions (``64 / sizeof(int32_t)``) become ``[...]``;
* integer ``#define`` constants become ``#define NAME ...``;
* functions that no built library exports are dropped, otherwise the API-mode
  module would fail at import with "undefined symbol";
* function bodies (``static inline`` helpers) are dropped: cffi declares, it
  does not define.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

_LINE_MARKER = re.compile(r'^#\s*(\d+)\s+"([^"]*)"')
_DEFINE = re.compile(r"^#define\s+([A-Za-z_]\w*)(\(?)\s*(.*)$")
_INT_LITERAL = r"(?:0[xX][0-9a-fA-F]+|\d+)[uUlL]*"
_IDENT = re.compile(r"[A-Za-z_]\w*")

# Macros that remove compiler-specific decoration before cffi sees the text.
_PREPROCESSOR_DEFINES = (
    "-D__attribute__(x)=",
    "-D__declspec(x)=",
    "-D__restrict=",
    "-D__restrict__=",
    "-D__inline=",
    "-D__extension__=",
    "-D__asm__(x)=",
    "-DGGML_RESTRICT=",
)


def preprocess(cc: list[str], headers: Iterable[str], include_dirs: list[Path]) -> str:
    """Run the C preprocessor over ``headers`` keeping line markers and #defines."""
    source = "".join(f'#include "{h}"\n' for h in headers)
    cmd = [*cc, "-E", "-dD", "-xc", *_PREPROCESSOR_DEFINES]
    cmd += [f"-I{d}" for d in include_dirs]
    cmd.append("-")
    proc = subprocess.run(cmd, input=source, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"preprocessing the llama.cpp headers failed:\n{proc.stderr}")
    return proc.stdout


def _own_lines(preprocessed: str, own_dirs: list[Path]) -> tuple[list[str], list[str]]:
    """Split the preprocessed text into declarations and #defines from ``own_dirs``."""
    prefixes = tuple(str(d.resolve()) for d in own_dirs)
    decls: list[str] = []
    defines: list[str] = []
    keep = False
    for line in preprocessed.splitlines():
        marker = _LINE_MARKER.match(line)
        if marker:
            try:
                keep = str(Path(marker.group(2)).resolve()).startswith(prefixes)
            except (OSError, ValueError):
                keep = False
            continue
        if not keep:
            continue
        if line.startswith("#define"):
            defines.append(line)
        elif not line.startswith("#"):
            decls.append(line)
    return decls, defines


def _integer_constants(defines: list[str]) -> list[str]:
    """Names of object-like macros whose value is an integer constant expression."""
    values: dict[str, str] = {}
    for line in defines:
        m = _DEFINE.match(line)
        if not m or m.group(2):  # function-like macro
            continue
        values[m.group(1)] = m.group(3).strip()

    ints: set[str] = set()
    changed = True
    while changed:  # macros may be defined in terms of other integer macros
        changed = False
        for name, value in values.items():
            if name in ints or not value or '"' in value or "'" in value:
                continue
            body = re.sub(_INT_LITERAL, "0", value)
            if not re.fullmatch(r"[\w\s()+\-*/<>|&~^]+", body):
                continue
            idents = [i for i in _IDENT.findall(body) if not i.isdigit()]
            if all(i in ints for i in idents):
                ints.add(name)
                changed = True
    return sorted(ints)


def _statements(text: str) -> list[str]:
    """Split C text into top-level statements (``;`` or a function body at depth 0)."""
    out: list[str] = []
    depth = 0
    start = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                # a function body ends a statement without a ';'
                rest = text[i + 1:].lstrip()
                head = text[start:i]
                if not rest.startswith(";") and re.search(r"\)\s*\{", head) and not head.lstrip().startswith(
                    ("typedef", "struct", "union", "enum")
                ):
                    out.append(text[start:i + 1])
                    start = i + 1
        elif ch == ";" and depth == 0:
            out.append(text[start:i + 1])
            start = i + 1
        i += 1
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return [s.strip() for s in out if s.strip()]


def _function_name(stmt: str) -> str | None:
    """The declared function's name, or None if ``stmt`` declares no function."""
    if stmt.startswith("typedef") or "(" not in stmt:
        return None
    head = stmt.split("(", 1)[0]
    if "{" in head or "=" in head:  # a struct/enum definition or an initialised variable
        return None
    names = _IDENT.findall(head)
    return names[-1] if names else None


def _rewrite_enums(stmt: str, enums: dict[str, list[str]]) -> str:
    """Keep enum member names only; the compiler supplies their values.

    Named enums are recorded in ``enums`` (tag or typedef name -> members) so
    that Python can build IntEnum classes without a hand-written list.
    """

    def replace(m: re.Match[str]) -> str:
        members = []
        depth = 0
        current = ""
        for ch in m.group(2):
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            if ch == "," and depth == 0:
                members.append(current)
                current = ""
            else:
                current += ch
        members.append(current)
        names = [mem.split("=", 1)[0].strip() for mem in members]
        names = [n for n in names if n]
        tag = m.group(1).split()[1:] or re.findall(r"\}\s*(\w+)\s*;$", stmt)
        if tag:
            enums.setdefault(tag[0], names)
        return f"{m.group(1)}{{ {', '.join(names + ['...'])} }}"

    return re.sub(r"(\benum\s*\w*\s*)\{([^{}]*)\}", replace, stmt)


def _rewrite_array_sizes(stmt: str) -> str:
    def replace(m: re.Match[str]) -> str:
        inner = m.group(1).strip()
        return m.group(0) if (inner == "" or re.fullmatch(_INT_LITERAL, inner)) else "[...]"

    return re.sub(r"\[([^\[\]]*)\]", replace, stmt)


@dataclass
class Declarations:
    cdef: str
    dropped: list[str]  # functions declared in a header that no library exports
    enums: dict[str, list[str]]  # enum name -> member names, in declaration order


def generate_cdef(
    preprocessed: str,
    own_dirs: list[Path],
    is_exported: Callable[[str], bool],
) -> Declarations:
    """Build the cdef text from the preprocessed headers."""
    decls, defines = _own_lines(preprocessed, own_dirs)
    text = re.sub(r"\s+", " ", "\n".join(decls))
    kept: list[str] = []
    dropped: list[str] = []
    seen: set[str] = set()
    enums: dict[str, list[str]] = {}
    for stmt in _statements(text):
        if stmt in seen:  # C11 allows a typedef to be repeated; cffi does not
            continue
        seen.add(stmt)
        if stmt.endswith("}") and not stmt.endswith("};"):
            continue  # an inline function body
        name = _function_name(stmt)
        if name is not None and not is_exported(name):
            dropped.append(name)
            continue
        if stmt.startswith("static "):
            continue
        stmt = _rewrite_array_sizes(_rewrite_enums(stmt, enums))
        kept.append(stmt)
    kept.extend(f"#define {name} ..." for name in _integer_constants(defines))
    return Declarations(cdef="\n".join(kept) + "\n", dropped=dropped, enums=enums)
