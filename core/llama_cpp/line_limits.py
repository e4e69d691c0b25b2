"""llama-server's two stopping rules on lines, for code completion in editors: ``n_indent`` and
``t_max_predict_ms``.

Editor plugins (llama.vim, llama.vscode) ask for a completion of the code at the cursor and want it to end where
the block ends: with ``n_indent`` the generation stops at the first line, after the first one, that is indented
less than that many spaces or tabs, and that line's text is taken back; with ``t_max_predict_ms`` it stops at a
line break once the generation has run that long, so a slow model still answers with whole lines.  Both end
the choice with ``stop_type`` ``"limit"``, as llama-server's do; :meth:`Llama.completion_events` applies them to
the text each token releases, in llama-server's order (the indentation of the line before this token, then
this token's line break and the time).
"""

from __future__ import annotations

import attrs


@attrs.define
class LineLimits:
    """The rules for one choice, and what they have seen of its text."""

    n_indent: int = 0  # least indentation of the lines after the first (0: no rule)
    t_max_predict_ms: float = -1  # generation time after which a line break ends it (<= 0: no rule)
    text: str = ""
    has_new_line: bool = False
    line_start: int = 0  # where the line whose indentation is checked starts (0: none yet)

    @property
    def active(self) -> bool:
        return self.n_indent > 0 or self.t_max_predict_ms > 0

    def feed(self, text: str, generating_ms: float) -> int | None:
        """Add the text a token released, ``generating_ms`` after the first token; None to go on, else how
        many characters at the end of the text the rule takes back (0 for the time limit)."""
        self.text += text
        if self.has_new_line and self.n_indent > 0:
            if self.line_start > 0:
                pos = self.line_start
                while pos < len(self.text) and self.text[pos] in " \t":
                    pos += 1
                if pos < len(self.text) and pos - self.line_start < self.n_indent:
                    return len(self.text) - pos
            found = self.text.find("\n", self.line_start)
            if found >= 0:
                self.line_start = found + 1
        if "\n" in text:
            self.has_new_line = True
            if 0 < self.t_max_predict_ms < generating_ms:
                return 0
        return None
