"""Resource limits for untrusted GBNF grammars, checked before llama.cpp parses them.

llama.cpp's grammar code (src/llama-grammar.cpp) trusts its input, and a few
lines of GBNF can make it allocate until the process dies or loop for hours:

- ``x{5,2}``: ``max - min`` wraps around as uint64 and the repetition
  expansion allocates without end;
- ``"<a long literal>"{2000}``: a repetition copies the repeated item's
  elements ``n`` times (a 20 kB grammar took 650 MB);
- ``((((...))))`` nested tens of thousands deep, or a chain of tens of
  thousands of rules each starting with the next: the parser and the left
  recursion check recurse and overflow the C stack (a crash, not an error);
- rules that start with optional items repeated inside each other
  (``y ::= x{0,2000} | ""`` with ``root ::= y{0,2000}``): the left recursion
  check walks every path, and the parse stacks llama.cpp keeps for the start
  of a match multiply (hours);
- left recursion hidden behind a rule that can match the empty string
  without an empty alternative (``root ::= x root "a" | "b"`` with
  ``x ::= "c"?``): llama.cpp's check misses it and the stack expansion grows
  until ``std::bad_alloc`` aborts the process.

:func:`check_gbnf` scans the text once, mirroring the lexical structure and
the rule shapes of llama.cpp's parser without building its rules, and raises
``ValueError`` (with the line and column) for each of those.  It takes time
linear in the text and memory proportional to the number of rules, with
every count saturated at its limit, so that the scan cannot itself be made
slow or large.  What it does not understand is left to llama.cpp, which
rejects it: where the syntax is wrong, llama.cpp stops there too.
"""

from __future__ import annotations

import re
from array import array
from typing import Iterator, TypeAlias

# A generous cap: llama.cpp's example grammars are under 10 kB and the grammar
# of a schema with 5000 properties 330 kB.  The scan takes about 0.5 s per MiB
# (2 s for the densest mix of tiny tokens).
MAX_GBNF_CHARS = 1 << 20
# Parentheses nested this deep cost llama.cpp's recursive parser about 300 kB
# of stack; 2000 levels overflow a 1 MB thread stack and 20000 the 8 MB main
# stack.  The grammars llama.cpp's JSON schema converter writes nest a few
# levels (a pattern at most 100, a property name's characters up to 256).
MAX_NESTING = 512
# llama.cpp's own MAX_REPETITION_THRESHOLD: it refuses a larger minimum and
# treats a larger maximum as no maximum.
MAX_REPETITION = 2000
# The rule elements (8 bytes each, plus the rule and symbol of each
# repetition rule) that llama.cpp builds after expanding repetitions: at most
# about 60 MB while the grammar is parsed.  A schema with 100 strings of
# maxLength 2000 needs 800k (43 MB).
MAX_ELEMENTS = 1_000_000
# Rules nested at the start of a match: llama.cpp's left recursion check
# recurses once per rule (about 100 bytes of stack each) and its parse stacks
# grow by one entry per rule; a nullable item repeated {0,2000} needs 2000.
MAX_START_DEPTH = 2048
# Parse stacks llama.cpp keeps for one position (the alternatives a match can
# start with, times the repetitions of optional items): it compares each new
# stack with all the others, so 4096 cost about 25 ms per character.
MAX_START_WAYS = 4096
# Steps of llama.cpp's left recursion check, which revisits a rule on every
# path that reaches it: 10 million take about 50 ms.
MAX_START_WORK = 10_000_000

_UINT64_MAX = (1 << 64) - 1
_TERM = -1  # an item that matches characters or a token (not a rule)
_RULE, _CHAIN, _SEQ = 0, 1, 2

# An item of an alternative: _TERM, a node id, or (node id, times) for a node repeated at the start
_Item: TypeAlias = "int | tuple[int, int]"
_Alt: TypeAlias = "tuple[_Item, ...]"
# What _Scan.alts keeps per node (see there); None until the node's rule is parsed, and for a chain
_Alts: TypeAlias = "list[_Alt] | _Alt | int | None"

_SPACE_NL = re.compile(r"(?:[ \t\r\n]+|#[^\r\n]*)*")
_SPACE = re.compile(r"(?:[ \t]+|#[^\r\n]*)*")
_NAME = re.compile(r"[a-zA-Z0-9-]+")
_INT = re.compile(r"[0-9]+")
_BRACES = re.compile(r"\{([0-9]+)(,?)([0-9]*)\}")  # the usual spelling, without spaces or comments
_TOKEN = re.compile(r"!?<[^>]*>")
_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", re.S)
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_SPACE_START = frozenset(" \t#")
_SPACE_NL_START = frozenset(" \t#\r\n")
_TERM_ALT: _Alt = (_TERM,)


def check_gbnf(text: str, root: str = "root") -> None:
    """Raise ValueError if ``text`` would make llama.cpp allocate without bound or take long.

    Syntax errors are not reported here (llama.cpp's parser says where they
    are); only what the text up to the first of them would cost.
    """
    if len(text) > MAX_GBNF_CHARS:
        raise ValueError(f"invalid GBNF grammar: it is {len(text)} characters long; at most {MAX_GBNF_CHARS}")
    nul = text.find("\x00")
    if nul >= 0:
        raise ValueError(f"invalid GBNF grammar: a NUL character at {_where(text, nul)} "
                         "(llama.cpp reads the grammar as a C string); write \\x00 in a literal instead")
    scan = _Scan(text)
    if scan.parse() and scan.complete(root):
        _Starts(scan).check()


def _skip(space: re.Pattern[str], text: str, pos: int) -> int:
    """The offset after the spaces and comments (``space``: _SPACE or _SPACE_NL) at ``pos``."""
    m = space.match(text, pos)
    assert m is not None  # both patterns match the empty string, so at any offset
    return m.end()


def _where(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    return f"line {line}, column {offset - (text.rfind(chr(10), 0, offset) + 1) + 1}"


def _closing(text: str, pos: int, end: str) -> int:
    """The offset of the ``end`` that closes a literal or class opened before ``pos``, or -1.

    It is the first one after an even number of backslashes (an escape is a
    backslash and one character, or hex digits that cannot be ``end``).  A
    regular expression would keep state for each escape: megabytes here.
    """
    while True:
        pos = text.find(end, pos)
        if pos < 0:
            return -1
        back = pos
        while text[back - 1] == "\\":
            back -= 1
        if (pos - back) % 2 == 0:
            return pos
        pos += 1


def _chars(body: str) -> int:
    """How many characters (llama.cpp elements) a literal or class body holds, escapes counted once."""
    if "\\" not in body:
        return len(body)
    return len(body) - sum(m.end() - m.start() - 1 for m in _ESCAPE.finditer(body))


class _Frame:
    """One rule or group being parsed: its alternatives and its last symbol (for repetitions).

    ``items`` records the current alternative up to its first terminal, which
    is all that matters for where a match can start; ``last`` is the whole
    last symbol, which a repetition copies, and ``last_at`` where it starts
    in ``items`` (None when it comes after the first terminal).
    """

    __slots__ = ("node", "nested", "alts", "items", "closed", "size", "last", "last_size", "last_at")

    def __init__(self, node: int, nested: bool) -> None:
        self.node, self.nested = node, nested
        self.alts: list[_Alt] = []
        self.size = 0
        self.items: list[_Item] = []
        self.closed = False
        self.last: _Alt = ()
        self.last_size = 0
        self.last_at: int | None = None


class _Scan:
    """The rules of a GBNF text in the shape llama.cpp's parser gives them.

    Nodes are named rules and groups (``_RULE``), the chain of rules a
    repetition generates (``_CHAIN``, one node for all of them), and a repeated
    sequence of several items (``_SEQ``, not a rule in llama.cpp).  An item is
    ``_TERM``, a node id, or ``(node id, times)``.  Ids are given in the order
    llama.cpp gives its own (its chain's rules being consecutive).
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.kind = bytearray()
        self.where = array("i")  # offset in the text, for messages
        self.owner = array("i")  # the named rule a node belongs to
        self.size = array("i")  # llama.cpp elements of the rule (of each rule of a chain), at most MAX_ELEMENTS
        # alternatives of a rule, group or sequence: a list of item tuples, or for a single
        # alternative its tuple, or for a single item that item (a million groups cost 30 MB less)
        self.alts: list[_Alts] = []
        self.chain_item = array("i")  # per node: the item a chain repeats
        self.chain_len = array("i")  # per node: how many rules a chain has (0: one, unbounded)
        self.names: dict[str, int] = {}
        self.defined: set[int] = set()
        self.elements = 0

    def node(self, kind: int, where: int, owner: int) -> int:
        node = len(self.kind)
        self.kind.append(kind)
        self.where.append(where)
        self.owner.append(owner if owner >= 0 else node)
        self.size.append(0)
        self.alts.append(None)
        self.chain_item.append(_TERM)
        self.chain_len.append(0)
        return node

    def named(self, name: str, where: int) -> int:
        node = self.names.get(name)
        if node is None:
            node = self.names[name] = self.node(_RULE, where, -1)
        return node

    def fail(self, offset: int, subject: str, detail: str) -> ValueError:
        return ValueError(f"invalid GBNF grammar: {subject} at {_where(self.text, offset)}: {detail}")

    def count(self, offset: int, added: int) -> None:
        self.elements += added
        if self.elements > MAX_ELEMENTS:
            raise self.too_large(offset)

    def too_large(self, offset: int) -> ValueError:
        return self.fail(offset, "the item", f"the grammar expands to more than {MAX_ELEMENTS} rule elements "
                                             "(llama.cpp stores each character of a literal or class, and copies "
                                             "a repeated item once per repetition: repeat a rule reference rather "
                                             "than a long literal)")

    # -- parsing, as llama_grammar_parser::parse does it ---------------------------------------

    def parse(self) -> bool:
        """Scan all rules; False where llama.cpp would stop at a syntax error."""
        text, n = self.text, len(self.text)
        pos = _skip(_SPACE_NL, text, 0)
        while pos < n:
            name = _NAME.match(text, pos)
            if not name:
                return False
            pos = _skip(_SPACE, text, name.end())
            if not text.startswith("::=", pos):
                return False
            rule = self.named(name.group(), name.start())
            self.where[rule] = name.start()  # messages point at the definition
            pos = self.alternates(rule, _skip(_SPACE_NL, text, pos + 3))
            if pos < 0:
                return False
            self.defined.add(rule)
            if pos < n:
                if text[pos] not in "\r\n":
                    return False
                pos += 2 if text.startswith("\r\n", pos) else 1
            pos = _skip(_SPACE_NL, text, pos)
        return True

    def alternates(self, rule: int, pos: int) -> int:
        """Parse the alternatives of ``rule`` and its groups; the end offset, or -1 on a syntax error."""
        text, n = self.text, len(self.text)
        frames = [_Frame(rule, nested=False)]
        f, space, starts = frames[-1], _SPACE, _SPACE_START
        while True:
            c = text[pos] if pos < n else ""
            if c in _WORD:
                m = _NAME.match(text, pos)
                assert m is not None  # c, a character of _WORD, is a name of one character at least
                self.ref(f, pos, self.named(m.group(), pos))
                pos = m.end()
            elif c == '"' or c == "[":
                end = _closing(text, pos + 1, '"' if c == '"' else "]")
                if end < 0:
                    return -1
                self.terminal(f, pos, _chars(text[pos + 1:end]))
                pos = end + 1
            elif c == "(":
                if len(frames) > MAX_NESTING:
                    raise self.fail(pos, "the parenthesis", f"parentheses nest more than {MAX_NESTING} deep "
                                                            "(llama.cpp's parser recurses once per level)")
                f = _Frame(self.node(_RULE, pos, rule), nested=True)
                frames.append(f)
                space, starts = _SPACE_NL, _SPACE_NL_START
                pos += 1
            elif c == "<" or c == "!":
                m = _TOKEN.match(text, pos)
                if not m:
                    return -1
                self.terminal(f, pos, 1)
                pos = m.end()
            elif c == ".":
                self.terminal(f, pos, 1)
                pos += 1
            elif c == "*" or c == "+" or c == "?":
                if not self.repeat(f, pos, 1 if c == "+" else 0, 1 if c == "?" else None):
                    return -1
                pos += 1
            elif c == "{":
                pos = self.braces(f, pos, space)
                if pos < 0:
                    return -1
            elif c == "|":
                self.end_alternative(f, pos)
                pos = _skip(_SPACE_NL, text, pos + 1)
                continue
            else:
                self.end_rule(f, pos)
                if not f.nested:
                    return pos
                if c != ")":
                    return -1
                frames.pop()
                group, f = f.node, frames[-1]
                if not f.nested:
                    space, starts = _SPACE, _SPACE_START
                self.ref(f, pos, group)
                pos += 1
            if pos < n and text[pos] in starts:
                pos = _skip(space, text, pos)

    def braces(self, f: _Frame, start: int, space: re.Pattern[str]) -> int:
        """``{m}``, ``{m,}`` or ``{m,n}``: the offset after it, or -1 on a syntax error."""
        text = self.text
        m = _BRACES.match(text, start)
        if m:
            low, comma, high, pos = m.group(1), m.group(2), m.group(3), m.end() - 1
        else:
            pos = _skip(space, text, start + 1)
            found = _INT.match(text, pos)
            if not found:
                return -1
            low, comma, high = found.group(), "", ""
            pos = _skip(space, text, found.end())
            if text.startswith(",", pos):
                comma, pos = ",", _skip(space, text, pos + 1)
                found = _INT.match(text, pos)
                if found:
                    high, pos = found.group(), _skip(space, text, found.end())
            if not text.startswith("}", pos):
                return -1
        shown = text[start:pos + 1] if pos + 1 - start <= 64 else text[start:start + 60] + "...}"
        lo = self.repetition_count(low, start, shown)
        hi = lo if not comma else self.repetition_count(high, start, shown) if high else None
        if lo > MAX_REPETITION:
            raise self.fail(start, f"repetition {shown}", f"the minimum is larger than {MAX_REPETITION} "
                                                          "(llama.cpp's limit)")
        if hi is not None and hi < lo:
            raise self.fail(start, f"repetition {shown}", "the minimum is larger than the maximum")
        if not self.repeat(f, start, lo, hi):
            return -1
        return pos + 1

    def repetition_count(self, digits: str, start: int, shown: str) -> int:
        if len(digits) > 20 or int(digits) > _UINT64_MAX:
            raise self.fail(start, f"repetition {shown}", f"a count is larger than {_UINT64_MAX}")
        return int(digits)

    def terminal(self, f: _Frame, pos: int, size: int) -> None:
        f.size += size
        self.count(pos, size)
        if size == 0:  # "" or []: no element, nothing for a repetition to repeat
            f.last, f.last_size, f.last_at = (), 0, None
            return
        f.last, f.last_size = _TERM_ALT, size
        f.last_at = None if f.closed else len(f.items)
        if not f.closed:
            f.items.append(_TERM)
            f.closed = True

    def ref(self, f: _Frame, pos: int, node: int) -> None:
        f.size += 1
        self.elements += 1
        if self.elements > MAX_ELEMENTS:
            raise self.too_large(pos)
        f.last, f.last_size = (node,), 1
        f.last_at = None if f.closed else len(f.items)
        if not f.closed:
            f.items.append(node)

    def repeat(self, f: _Frame, pos: int, lo: int, hi: int | None) -> bool:
        """Apply ``S{lo,hi}`` to the last symbol S as handle_repetitions does; False if there is none."""
        k, symbol = f.last_size, f.last
        if k == 0:
            return False
        if hi is None or hi > MAX_REPETITION:  # one rule S' ::= S S' |
            unbounded, n_opt = True, 1
        else:
            unbounded, n_opt = False, hi - lo
        # S{m,n} -> S (m times) S'(n-m), each S'(x) ::= S S'(x-1) | (the first without the reference)
        grown = ((lo - 1) * k if lo else -k) + (1 if n_opt else 0)
        f.size += grown
        self.count(pos, grown + n_opt * (k + 3))
        new: _Alt = symbol if lo == 1 else ()
        if lo > 1 or n_opt:
            # one item for S: several items (or copies of one) become a sequence node
            item = symbol[0] if len(symbol) == 1 else self.sequence(symbol, pos, f.node)
            if lo > 1:
                new = (_times(item, lo),)
            if n_opt:
                chain = self.node(_CHAIN, pos, self.owner[f.node])
                self.size[chain] = k + 3
                repeated = self.sequence((item,), pos, f.node) if isinstance(item, tuple) else item
                self.chain_item[chain], self.chain_len[chain] = repeated, 0 if unbounded else n_opt
                new += (chain,)
        f.last, f.last_size = new, (lo * k if lo else 0) + (1 if n_opt else 0)
        if f.last_at is not None:
            del f.items[f.last_at:]
            f.closed = False
            for it in new:
                f.items.append(it)
                if it == _TERM:
                    f.closed = True
                    break
        return True

    def sequence(self, items: _Alt, pos: int, owner_node: int) -> int:
        node = self.node(_SEQ, pos, self.owner[owner_node])
        self.alts[node] = items[:items.index(_TERM) + 1] if _TERM in items else items
        return node

    def alternatives(self, node: int) -> list[_Alt] | tuple[_Alt, ...]:
        """The item tuples of a rule, group or sequence."""
        value = self.alts[node]
        # None is left only for a chain (every rule and group was parsed to its end before the check),
        # and the check reads a chain's chain_item and chain_len instead
        assert value is not None, f"node {node} has no alternatives of its own"
        return ((value,),) if isinstance(value, int) else (value,) if isinstance(value, tuple) else value

    def end_alternative(self, f: _Frame, pos: int) -> None:
        """A ``|``: llama.cpp adds an ALT element and starts a sequence with no last symbol."""
        f.alts.append(_alternative(f.items))
        f.size += 1
        self.count(pos, 1)
        f.items, f.closed, f.last, f.last_size, f.last_at = [], False, (), 0, None

    def end_rule(self, f: _Frame, pos: int) -> None:
        """The END element; the frame is done with."""
        alts = f.alts
        f.size += 1
        self.count(pos, 1)
        if alts:
            alts.append(_alternative(f.items))
            self.alts[f.node] = alts
        else:
            items = f.items
            self.alts[f.node] = items[0] if len(items) == 1 and isinstance(items[0], int) else tuple(items)
        self.size[f.node] = f.size

    def complete(self, root: str) -> bool:
        """Whether llama.cpp would go on to check the rules (every name defined, the root among them)."""
        return root in self.names and len(self.defined) == len(self.names)


def _alternative(items: list[_Item]) -> _Alt:
    """The alternative's items as a tuple, shared for the two commonest (a terminal first, nothing)."""
    return _TERM_ALT if items == _TERM_LIST else () if not items else tuple(items)


_TERM_LIST: list[_Item] = [_TERM]


def _times(item: _Item, times: int) -> _Item:
    if item == _TERM:
        return _TERM
    node, before = (item, 1) if isinstance(item, int) else item
    return (node, min(before * times, MAX_START_WAYS + 1))


def _plain(item: _Item) -> int:
    """The node of an item (or _TERM)."""
    return item if isinstance(item, int) else item[0]


class _Starts:
    """Where a match of each rule can start, and what that costs llama.cpp.

    An edge X -> Y means that a match of X can start with a match of Y (Y is
    the first item of an alternative of X, or comes after items that can
    match nothing).  llama.cpp follows these edges in two places:

    - its left recursion check (llama_grammar_detect_left_recursion) takes
      an item as able to match nothing only if its rule has an empty
      alternative ("passable" here), and walks the edges recursively without
      remembering what it has seen: its recursion ``depth`` and its steps
      (``work``) are bounded here, and a cycle is its own "left recursion";
    - its parse stacks (llama_grammar_advance_stack) follow every edge whose
      item can match nothing ("nullable"), hidden behind a group or not: one
      stack per way a match can start (``ways``), one entry more for each
      edge that has items after it (``growth``).  Around a cycle of such edges
      the stacks grow without end (a hang, then std::bad_alloc); a cycle of
      edges at the ends of their alternatives leaves them as they were.

    Every measure is saturated at its limit.
    """

    def __init__(self, scan: _Scan) -> None:
        self.s = scan
        n = len(scan.kind)
        self.nullable = bytearray(n)
        self.passable = bytearray(n)
        self.depth = array("q", bytes(8 * n))
        self.work = array("q", bytes(8 * n))
        self.ways = array("q", bytes(8 * n))
        self.growth = array("q", bytes(8 * n))

    def check(self) -> None:
        self.find_nullable()
        self.find_passable()
        self.check_recursion()
        self.total_work()
        self.check_stacks()

    # -- which nodes can match nothing --------------------------------------------------------

    def find_nullable(self) -> None:
        """Which nodes can match the empty string (the least fixed point, in linear time)."""
        s = self.s
        waiting: dict[int, list[int]] = {}
        missing: list[int] = []  # per alternative: its references not yet known to be nullable
        owner_of: list[int] = []
        ready: list[int] = []
        for node, kind in enumerate(s.kind):
            if kind == _CHAIN:
                self.nullable[node] = 1
                ready.append(node)
                continue
            for alt in s.alternatives(node):
                if _TERM in alt:
                    continue
                owner_of.append(node)
                missing.append(len(alt))
                for item in alt:
                    waiting.setdefault(_plain(item), []).append(len(missing) - 1)
                if not alt and not self.nullable[node]:
                    self.nullable[node] = 1
                    ready.append(node)
        while ready:
            for index in waiting.pop(ready.pop(), ()):
                missing[index] -= 1
                node = owner_of[index]
                if missing[index] == 0 and not self.nullable[node]:
                    self.nullable[node] = 1
                    ready.append(node)

    def find_passable(self) -> None:
        """llama.cpp's "may be empty": a rule with an empty alternative (a chain's rules all have one).

        A sequence is not a rule (its items stand in the rule that repeats
        it), so it is passable when all of them are; they are older nodes.
        """
        s = self.s
        for node, kind in enumerate(s.kind):
            if kind == _CHAIN:
                self.passable[node] = 1
            elif kind == _SEQ:
                alt = s.alternatives(node)[0]
                self.passable[node] = _TERM not in alt and all(self.passable[_plain(i)] for i in alt)
            else:
                self.passable[node] = any(not alt for alt in s.alternatives(node))

    def edges(self, node: int, through: bytearray) -> Iterator[tuple[int, int, bool]]:
        """(target, times, has items after it) for each node a match of ``node`` can start with.

        ``through`` says which items can be passed over (``nullable`` or
        ``passable``).  A chain's edges to its own next rule are left to the
        measures: they never form a cycle with others (``S*`` with S
        passable is a cycle of one, refused by the left recursion check).
        """
        s = self.s
        kind = s.kind[node]
        if kind == _CHAIN:
            repeated = s.chain_item[node]
            if repeated != _TERM:
                yield repeated, 1, s.chain_len[node] != 1
            return
        for alt in s.alternatives(node):
            last = len(alt) - 1
            for index, item in enumerate(alt):
                if item == _TERM:
                    break
                target, times = (item, 1) if isinstance(item, int) else item
                after = kind == _SEQ or times > 1 or index < last
                if not through[target]:
                    yield target, 1, after
                    break
                yield target, times, after

    # -- llama.cpp's left recursion check -----------------------------------------------------

    def check_recursion(self) -> None:
        """Depth-first over the passable edges: refuse a cycle, measure depth and work bottom-up."""
        s = self.s
        color = bytearray(len(s.kind))  # 0 new, 1 on the path, 2 done
        for start in range(len(s.kind)):
            if color[start]:
                continue
            path: list[int] = [start]
            pending: list[Iterator[tuple[int, int, bool]]] = [self.edges(start, self.passable)]
            color[start] = 1
            while path:
                step = next(pending[-1], None)
                if step is not None:
                    target = step[0]
                    if color[target] == 1:
                        raise self.left_recursion(path[path.index(target):], grows=False)
                    if color[target] == 0:
                        if len(path) > 2 * MAX_START_DEPTH:  # deeper than measure_recursion() allows
                            raise self.too_deep(path[0])
                        color[target] = 1
                        path.append(target)
                        pending.append(self.edges(target, self.passable))
                    continue
                node = path.pop()
                pending.pop()
                color[node] = 2
                self.measure_recursion(node)

    def measure_recursion(self, node: int) -> None:
        s, cap = self.s, MAX_START_WORK + 1
        kind = s.kind[node]
        if kind == _CHAIN:
            item, n = s.chain_item[node], s.chain_len[node]
            if not n and self.passable_item(node):  # S' ::= S S' | with S passable
                raise self.left_recursion([node], grows=False)
            depth = self.depth[item] if item != _TERM else 0
            step = self.chain_step(node)
            if n and self.passable_item(node):  # S'(x) ::= S S'(x-1) | : each starts with the next
                depth, work = depth + n, step * n
            else:
                depth, work = depth + 1, step
        else:
            depth = work = 0
            for target, times, _ in self.edges(node, self.passable):
                depth = max(depth, self.depth[target])
                work = min(work + times * self.work[target], cap)
            if kind == _RULE:  # a sequence is not a rule of its own
                depth, work = depth + 1, work + s.size[node]
        self.depth[node] = depth
        self.work[node] = min(work, cap)
        if depth > MAX_START_DEPTH:
            raise self.too_deep(node)

    def passable_item(self, node: int) -> bool:
        item = self.s.chain_item[node]
        return item != _TERM and bool(self.passable[item])

    def chain_step(self, node: int) -> int:
        """Steps of the check for one rule of a chain, without the rule it starts with."""
        item = self.s.chain_item[node]
        return self.s.size[node] + (self.work[item] if item != _TERM else 0)

    def chain_total(self, node: int) -> int:
        """Steps of the check over all the rules of a chain when each is checked on its own, in order."""
        n = self.s.chain_len[node]
        if not n:
            return self.work[node]
        if self.passable_item(node):
            return self.chain_step(node) * n * (n + 1) // 2
        return self.chain_step(node) * n

    def total_work(self) -> None:
        """Steps of llama.cpp's left recursion check over the whole grammar.

        It checks the rules in the order of their ids (ours are in the same
        order), from each one that no earlier check has reached; a chain's
        rules S'(1), S'(2), ... come in that order, each starting with the one
        before when S is passable.
        """
        s = self.s
        reached = bytearray(len(s.kind))
        total = 0
        for node in range(len(s.kind)):
            kind = s.kind[node]
            if kind == _SEQ:
                continue
            if not reached[node]:
                total += self.chain_total(node) if kind == _CHAIN else self.work[node]
                self.reach(node, reached)
            elif kind == _CHAIN and s.chain_len[node] > 1 and not self.passable_item(node):
                total += self.chain_step(node) * (s.chain_len[node] - 1)  # only the first was reached
            if total > MAX_START_WORK:
                raise self.fail(node, f"checking the grammar for left recursion would take llama.cpp more than "
                                      f"{MAX_START_WORK} steps (rules that start with optional items "
                                      "repeated many times, or that many rules start with)")

    def reach(self, node: int, reached: bytearray) -> None:
        stack = [node]
        reached[node] = 1
        while stack:
            for target, _, _ in self.edges(stack.pop(), self.passable):
                if not reached[target]:
                    reached[target] = 1
                    stack.append(target)

    # -- llama.cpp's parse stacks -------------------------------------------------------------

    def check_stacks(self) -> None:
        """Strongly connected components of the nullable edges (Tarjan's, without recursion), sinks first."""
        s = self.s
        n = len(s.kind)
        index = array("q", [-1]) * n
        low = array("q", bytes(8 * n))
        on_stack = bytearray(n)
        stack: list[int] = []
        counter = 0
        for start in range(n):
            if index[start] >= 0:
                continue
            index[start] = low[start] = counter
            counter += 1
            stack.append(start)
            on_stack[start] = 1
            pending: list[tuple[int, Iterator[tuple[int, int, bool]]]] = [(start, self.edges(start, self.nullable))]
            while pending:
                node, edges = pending[-1]
                step = next(edges, None)
                if step is not None:
                    target = step[0]
                    if index[target] < 0:
                        index[target] = low[target] = counter
                        counter += 1
                        stack.append(target)
                        on_stack[target] = 1
                        pending.append((target, self.edges(target, self.nullable)))
                    elif on_stack[target]:
                        low[node] = min(low[node], index[target])
                    continue
                pending.pop()
                if pending:
                    parent = pending[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack[member] = 0
                        members.append(member)
                        if member == node:
                            break
                    self.measure_stacks(members)

    def measure_stacks(self, members: list[int]) -> None:
        """Ways and growth of a component, the same for all its members (each reaches the others)."""
        s, cap = self.s, MAX_START_WAYS + 1
        inside = set(members)
        ways = growth = 0
        for node in members:
            for target, times, after in self.edges(node, self.nullable):
                if target in inside:
                    if after:
                        raise self.left_recursion(self.cycle(node, target, inside), grows=True)
                    continue
                ways = min(ways + times * self.ways[target], cap)
                growth = max(growth, self.growth[target] + after)
            if s.kind[node] == _CHAIN:
                item, n = s.chain_item[node], s.chain_len[node]
                if item == _TERM:
                    ways += 1
                elif n > 1 and self.nullable[item]:  # S'(x) ::= S S'(x-1) | : each starts with the next
                    ways *= n
            else:
                ways += sum(1 for alt in s.alternatives(node) if self.starts_with_terminal(alt))
        ways = min(ways, cap)
        for node in members:
            self.ways[node], self.growth[node] = ways, growth
        if growth > MAX_START_DEPTH:
            raise self.fail(members[-1], f"llama.cpp's parse stacks would nest more than {MAX_START_DEPTH} rules "
                                         "at the start of a match")
        if ways > MAX_START_WAYS:
            raise self.fail(members[-1], f"a match can start in more than {MAX_START_WAYS} ways (alternatives "
                                         "times repetitions of optional items; llama.cpp keeps a parse stack "
                                         "for each)")

    def starts_with_terminal(self, alt: _Alt) -> bool:
        """Whether a terminal comes first in ``alt`` once the items that can match nothing are passed."""
        for item in alt:
            if item == _TERM:
                return True
            if not self.nullable[_plain(item)]:
                return False
        return False

    def cycle(self, node: int, target: int, inside: set[int]) -> list[int]:
        """A path target -> ... -> node inside a component, for the message (breadth-first)."""
        came = {target: target}
        queue = [target]
        for current in queue:
            if current == node:
                break
            for nxt, _, _ in self.edges(current, self.nullable):
                if nxt in inside and nxt not in came:
                    came[nxt] = current
                    queue.append(nxt)
        path = [node]
        while path[-1] != target:
            path.append(came[path[-1]])
        return path[::-1]

    # -- messages -----------------------------------------------------------------------------

    def fail(self, node: int, detail: str) -> ValueError:
        s = self.s
        owner = s.owner[node]
        name = next((k for k, v in s.names.items() if v == owner), "?")
        subject = f"rule {name!r}" if owner == node else f"the part of rule {name!r}"
        return s.fail(s.where[node], subject, detail)

    def too_deep(self, node: int) -> ValueError:
        return self.fail(node, f"more than {MAX_START_DEPTH} rules nest at the start of a match "
                               "(llama.cpp's left recursion check recurses once per rule)")

    def left_recursion(self, cycle: list[int], grows: bool) -> ValueError:
        s = self.s
        by_id = {v: k for k, v in s.names.items()}
        names: list[str] = []
        for node in cycle + cycle[:1]:
            name = by_id.get(s.owner[node], "?")
            if not names or names[-1] != name:
                names.append(name)
        if len(names) == 1:
            names.append(names[0])
        why = ("llama.cpp misses it and its parse stacks grow without end" if grows
               else "llama.cpp cannot run it")
        return self.fail(cycle[0], "left recursion: a match can start with itself again, through items "
                                   f"that can match the empty string ({' -> '.join(names)}); {why}")
