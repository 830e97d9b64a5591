"""LaTeX final answers (MATH style): the last ``\\boxed{...}`` and a normalised string form."""

from __future__ import annotations

import re

__all__ = ["last_boxed", "normalize_math_answer"]

_BOX_COMMANDS = ("\\boxed", "\\fbox")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), with nested braces, or None.

    ``\\boxed 5`` (no braces) yields ``"5"``. An unclosed box yields None rather than a guess.
    """
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    if start < 0:
        return None
    cmd = next(c for c in _BOX_COMMANDS if text.startswith(c, start))
    i = start + len(cmd)
    if i < len(text) and text[i] == " ":
        rest = text[i + 1 :]
        token = re.match(r"[^\s$]+", rest)
        return token.group(0) if token else None
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    j = i
    while j < len(text):
        ch = text[j]
        if ch == "\\":  # an escaped character such as \{ never opens or closes the box
            j += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
        j += 1
    return None


_REMOVE = (
    "\\left",
    "\\right",
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\displaystyle",
    "$",
    "^\\circ",
    "^{\\circ}",
    "\\%",
    "%",
)


# "5 cm": the language of r"(-?[\d,]*\.?\d+)\s+[a-zA-Z ]+", written so that nothing backtracks over
# a long run (that form took quadratic time on a long digit or space run that does not match). The
# number ends in a digit (the lookbehind); the unit words either follow the maximal whitespace run,
# or are the final space of a run of two or more.
_NUMBER_WITH_UNIT = re.compile(r"(-?[\d,]*+(?:\.\d++)?)(?<=\d)(?:\s++[a-zA-Z ]+|\s*+(?<=\s\s)(?<= ))")


def _strip_text_wrappers(s: str) -> str:
    # \text{cm}, \mbox{ units}: keep the inside; unit words are dropped below when a number precedes.
    return re.sub(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}", r"\1", s)


def normalize_math_answer(answer: str) -> str:
    """A canonical string for comparing final answers when no symbolic checker is available.

    Removes spacing commands, ``\\left``/``\\right``, dollar signs, degree and percent marks,
    ``\\text{}`` wrappers, a leading ``x =``, trailing periods; unifies ``\\dfrac``/``\\tfrac`` to
    ``\\frac`` and ``\\frac12`` to ``\\frac{1}{2}``; drops thousands separators in plain integers;
    and removes all whitespace. Two answers are taken as equal when their normal forms are equal.
    """
    s = answer.strip()
    s = _strip_text_wrappers(s)
    for token in _REMOVE:
        s = s.replace(token, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"^\s*[a-zA-Z]\s*=\s*", "", s)  # "x = 5" -> "5"
    s = s.rstrip(".").strip()
    # A number followed by unit words ("5 cm", "12 inches").
    unit = _NUMBER_WITH_UNIT.fullmatch(s)
    if unit:
        s = unit.group(1)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+", s):
        s = s.replace(",", "")
    s = re.sub(r"\s+", "", s)
    if re.fullmatch(r"-?\d+\.0+", s):
        s = s.split(".")[0]
    if re.fullmatch(r"-?0?\.\d+", s) and s.lstrip("-").startswith("."):
        s = s.replace(".", "0.", 1)
    return s
