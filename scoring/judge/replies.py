"""Structure read from the judge's free text, without asking the judge for more.

EP-0028's score prompt asks for a breakdown ("Logical Flow: X/25", ...) in the
turn-1 analysis and a numbered list of missing tools in turn 2, but both replies
are free text: judges write the breakdown as lines, bullets, tables or headings,
and the tools as numbered items, headings or "Tool name:" lines. The prompts stay
as they are (``PROMPT_HASH``; other criteria versions may ask for another layout, and then
nothing is found); these parsers read what the judges write. The rules,
and what they do with partial or odd replies, are in docs/insights.md.
"""

import re
from dataclasses import dataclass

# The four criteria of the score prompt, as keys of ``SessionScore.dimensions``.
DIMENSIONS = ("logical_flow", "consistency", "tool_relevance", "synthesis_quality")
DIMENSION_LABELS = {
    "logical_flow": "Logical Flow",
    "consistency": "Consistency",
    "tool_relevance": "Tool Relevance",
    "synthesis_quality": "Synthesis Quality",
}
MAX_POINTS = 25
# Starts every warning the parsers add to a score's ``warnings``, which otherwise hold
# prompt-injection findings: a reader tells the two apart by it.
BREAKDOWN_WARNING_PREFIX = "score breakdown: "

# --- The criteria breakdown (turn 1) --------------------------------------------------------

_LABEL = {
    "logical_flow": r"logical[\s_-]*flow",
    "consistency": r"consistency",
    "tool_relevance": r"tool[\s_-]*relevance",
    "synthesis_quality": r"synthesis[\s_-]*quality",
}
_ANY_LABEL = re.compile("|".join(f"(?P<{key}>{pattern})" for key, pattern in _LABEL.items()), re.I)
# What may come before a label at the start of a line: quote, heading and list marks,
# numbering ("1.", "(2)", "a)"), table pipes.
_LINE_LEAD = r"^[\s>#|•+*_-]*(?:(?:\(?\d{1,2}[.):]|\(?[a-d][.)])[\s_]*)?"
# The prompt's own ranges, repeated in headings ("LOGICAL FLOW (0-25 points)"): not points.
_RANGE = re.compile(r"\(\s*(?:0\s*[-–]\s*25|max(?:imum)?\.?\s*25)(?:\s*(?:points|pts)\.?)?\s*\)", re.I)
# Points out of 25: "15/25", "15 / 25", "15 out of 25", "15 of 25".
_OUT_OF_25 = r"(\d{1,3})\s*(?:/|out\s+of|of)\s*25\b"
# Or a bare number right after the label and its separator: "Consistency: 18", "| 18 |",
# "Tool Relevance Score - 14 points"; not "-5" (a deduction) nor a number later in a sentence.
_BARE = r"(?<![\w+-])(\d{1,3})(?=\s*(?:points?\b|pts\b|$|[|.,;()]))"
_SEPARATOR = r"[\s:=|(\u2013\u2014-]*"
_SAME_LINE = re.compile(rf"^(?:{_SEPARATOR}(?:score\b{_SEPARATOR})?{_BARE}|[^\d\n]*?{_OUT_OF_25})", re.I)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s|^\s*\*\*[^*\n]+\*\*:?\s*$|^\s*__[^_\n]+__:?\s*$")
_SECTION_SCORE = re.compile(rf"{_OUT_OF_25}|\bscore\b\W{{0,5}}(\d{{1,3}})\b(?!\s*/\s*100)", re.I)
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_TABLE_RULE = re.compile(r"^\s*\|[\s:|-]+\|\s*$")


def _plain(line: str) -> str:
    """The line without emphasis and code marks, and without the prompt's point ranges."""
    return _RANGE.sub("", line.replace("**", "").replace("`", "").replace("*", " "))


def _label_at_start(line: str) -> tuple[str, str] | None:
    """(dimension, the rest of the line) when the line starts with a criterion's name."""
    match = re.match(_LINE_LEAD + rf"(?:{_ANY_LABEL.pattern})", line, re.I)
    if match is None:
        return None
    dimension = next(key for key in DIMENSIONS if match.group(key))
    return dimension, line[match.end() :]


def _points(text: str) -> int | None:
    match = _SAME_LINE.match(text)
    if match is None:
        return None
    value = int(next(group for group in match.groups() if group is not None))
    return value if 0 <= value <= MAX_POINTS else None


def _table_columns(lines: list[str], start: int) -> dict[str, int]:
    """A table whose header row names the criteria (one column each): its first data row."""
    header = [cell.strip() for cell in _plain(lines[start]).strip().strip("|").split("|")]
    columns = {}
    for index, cell in enumerate(header):
        found = _label_at_start(cell)
        if found and not found[1].strip(" :"):
            columns[index] = found[0]
    if len(columns) < 2:
        return {}
    for row in lines[start + 1 :]:
        if not _TABLE_ROW.match(row):
            break
        if _TABLE_RULE.match(row):
            continue
        cells = [cell.strip() for cell in _plain(row).strip().strip("|").split("|")]
        found = {}
        for index, dimension in columns.items():
            value = _points(cells[index]) if index < len(cells) else None
            if value is not None:
                found[dimension] = value
        return found
    return {}


def parse_dimensions(analysis: str | None) -> dict[str, int | None] | None:
    """The points of each criterion in a turn-1 analysis: the four ``DIMENSIONS`` as
    keys, None for a criterion the analysis gives no points for; None when it gives
    points for none of them.

    A criterion's points are read from a line that starts with its name (after list,
    heading, numbering, table and emphasis marks) and goes on to "X/25", "X out of 25"
    or a bare number; from a table whose header names the criteria; or from the first
    "X/25" or "Score: X" under a heading that names it. When a criterion is given points
    more than once (each section, then the breakdown), the last one counts: the prompt
    asks for the breakdown at the end.
    """
    found: dict[str, int] = {}
    lines = (analysis or "").splitlines()
    section: str | None = None  # the criterion whose heading the lines are under, until it scores
    for number, raw in enumerate(lines):
        line = _plain(raw)
        if _TABLE_ROW.match(raw) and (number == 0 or not _TABLE_ROW.match(lines[number - 1])):
            found.update(_table_columns(lines, number))
        labelled = _label_at_start(line)
        if labelled is not None:
            dimension, rest = labelled
            value = _points(rest)
            if value is not None:
                found[dimension] = value
                section = None
                continue
            section = dimension if _HEADING.match(raw) else None
            continue
        match = _SECTION_SCORE.search(line) if section is not None else None
        if match is not None:  # "Score: 14/25" under the criterion's heading, bold or not
            value = int(next(group for group in match.groups() if group is not None))
            if 0 <= value <= MAX_POINTS:
                found[section] = value
            section = None
        elif _HEADING.match(raw):
            section = None
    if not found:
        return None
    return {dimension: found.get(dimension) for dimension in DIMENSIONS}


def is_breakdown_warning(warning: str) -> bool:
    return warning.startswith(BREAKDOWN_WARNING_PREFIX)


def breakdown_warning(dimensions: dict | None, total_score: int | None) -> str | None:
    """Why the breakdown does not back the total, or None: some criteria have no points,
    or the four do not add up to the total. No breakdown at all is no warning."""
    if dimensions is None or total_score is None:
        return None
    missing = [DIMENSION_LABELS[key] for key in DIMENSIONS if dimensions.get(key) is None]
    if missing:
        return f"{BREAKDOWN_WARNING_PREFIX}no points found for {', '.join(missing)}"
    points = sum(dimensions[key] for key in DIMENSIONS)
    if points != total_score:
        return (
            f"{BREAKDOWN_WARNING_PREFIX}the four criteria add up to {points}, "
            f"not to the total score {total_score}"
        )
    return None


# --- Whether turn 1 holds an evaluation --------------------------------------------------

# The fewest words of evaluation a turn-1 analysis must hold. The score prompt asks for at
# least 200 words that explain each category's deductions; a few sentences are not that, and
# judges that skip the evaluation write none (small models answer with the score line alone,
# or the breakdown and the total).
MIN_EVALUATION_WORDS = 40
# The warning of a score whose judge gave no evaluation, even when asked once more.
ANALYSIS_MISSING_WARNING = (
    "no evaluation: the judge gave its score without the critical evaluation the criteria ask for, "
    "even when asked once more; the score is left out of the fleet statistics and agreement"
)
_TOTAL_LINE = re.compile(r"^\W*(?:(?:total|overall|final)\s+)?score\b", re.I)
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")


def evaluation_words(analysis: str | None) -> int:
    """The words of evaluation in a turn-1 analysis (the reply without its score line): its
    text but for the lines that give a criterion its points (the breakdown), a line that
    states a score ("Total Score: 54"), and headings."""
    words = 0
    for raw in (analysis or "").splitlines():
        line = _plain(raw)
        labelled = _label_at_start(line)
        if labelled is not None and _points(labelled[1]) is not None:
            continue
        if _TOTAL_LINE.match(line) or _HEADING.match(raw):
            continue
        words += len(_WORD.findall(line))
    return words


def has_evaluation(analysis: str | None) -> bool:
    """Whether a turn-1 analysis holds the evaluation the score prompt asks for: at least
    MIN_EVALUATION_WORDS words beside the breakdown, any score line and headings
    (``evaluation_words``). One rule, for the judge's follow-up and for the scores stored
    before it (docs/scoring.md, "A score without an evaluation")."""
    return evaluation_words(analysis) >= MIN_EVALUATION_WORDS


# --- The missing tools (turn 2) -----------------------------------------------------------


@dataclass(frozen=True)
class ToolName:
    name: str  # as the judge wrote it, without list marks, emphasis or backticks
    key: str  # normalised for counting (``tool_key``)


MAX_NAME_CHARS = 255  # MissingTool.name and .key
# A name in plain text is its first words; more than this is a sentence, not a name.
MAX_PLAIN_NAME_WORDS = 5
MAX_EMPHASIZED_NAME_WORDS = 8

_NO_TOOLS = re.compile(
    r"\bno\s+(?:critical\s+|additional\s+|significant\s+)*(?:missing\s+)?(?:mcp\s+)?tools?\s+"
    r"(?:were\s+|are\s+|have\s+been\s+|was\s+)?(?:identified|missing|found|needed)"
    r"|\bno\s+critical\s+missing\s+tools\b",
    re.I,
)
_LIST_ITEM = re.compile(r"^(?P<indent>[ \t]*)(?P<mark>\d{1,3}[.)]|\(\d{1,3}\)|[-*+•])[ \t]+(?P<text>\S.*)$")
_MARKDOWN_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(?P<text>\S.*)$")
_BOLD_LINE = re.compile(r"^\s*\*\*(?P<text>[^*\n]+?)\*\*\s*:?\s*$")
# "Tool name: X", "**Tool Name:** `X`", "Tool: X", "Missing tool 2: X", "Tool #1 - X".
_TOOL_FIELD = re.compile(
    r"^(?:missing\s+)?(?:mcp\s+)?tool(?:[\s_-]*name)?(?:\s*#?\s*\d{1,3})?\s*(?::|[-–—]\s)\s*\S", re.I
)
# Labels of the lines describing a tool (not naming one): "**Rationale:**", "Why:".
_FIELD_LABELS = re.compile(
    r"^(?:rationale|reason(?:ing)?|why(?:\s+it\s+was\s+needed)?|evidence|impact|purpose|description|"
    r"gap(?:\s+filled)?|what\s+it\s+would\s+(?:have\s+)?(?:provided?|shown)|expected\s+(?:evidence|outcome)|"
    r"priority|example|usage|how|when|note|benefit|details?|summary|conclusion|overview|recommendations?)\b",
    re.I,
)
# Headings about the reply, not a tool.
_GENERIC_HEADING = re.compile(
    r"\b(?:missing|tools\b|summary|conclusion|recommendations?|analysis|overview|rationale|priorit|"
    r"assessment|evaluation|gaps?\b|notes?\b)",
    re.I,
)
_CODE = re.compile(r"`+([^`\n]+?)`+")
_BOLD = re.compile(r"^(?:\*\*|__)(.+?)(?:\*\*|__)")
_NUMBERING = re.compile(r"^\d{1,3}[.):]\s*")
# Where a plain name ends: a spaced dash, a colon, a parenthesis, a sentence's punctuation.
_PLAIN_END = re.compile(r"\s[-\u2013\u2014]\s|:\s|:$|\s\(|[.;,]\s|\.$")
# "list_processes to confirm ...": a word that starts the description, after an identifier.
_WORD_END = re.compile(r"\s+(?:to|for|would|which|that|because|so|in|on)\s", re.I)
# One word with a separator inside, as tool names are: read-file, pods_log, prometheus.query.
_IDENTIFIER = re.compile(r"[\w:/.-]*[-_./][\w:/.-]*")
# Words a sentence starts with and a tool's name does not.
_SENTENCE_START = {
    "a", "an", "the", "it", "its", "this", "that", "these", "those", "they", "their", "we", "i",
    "to", "would", "should", "could", "because", "so", "and", "or", "which", "if", "when", "no", "not",
    "finally", "also", "then", "first", "second", "third", "additionally",
}
_CALL_PARENS = re.compile(r"\([^()]*\)$")
_SEPARATORS = re.compile(r"[\s_-]+")
_EDGE_PUNCTUATION = "\"'`*_.,:;!?()[]{}<>\u201c\u201d\u2018\u2019\u00ab\u00bb \t-\u2013\u2014"


def tool_key(name: str) -> str:
    """The tool's name for counting: lower case; emphasis, backticks, quotes and other
    punctuation around it dropped, and call parentheses after it ("read_file()"); every run
    of spaces, ``-`` and ``_`` made one ``-``. Dots, slashes and the rest are kept, so
    "kubernetes-server.pods_log" and "pods_log" stay two tools.
    """
    text = name.replace("**", "").replace("`", "").strip(_EDGE_PUNCTUATION.replace(")", ""))
    text = _CALL_PARENS.sub("", text).strip(_EDGE_PUNCTUATION)
    return _SEPARATORS.sub("-", text.lower()).strip("-")[:MAX_NAME_CHARS]


def _clean_name(text: str) -> str:
    return _NUMBERING.sub("", text.replace("**", "").replace("`", "").strip(_EDGE_PUNCTUATION)).strip()


def _name_in(text: str) -> str | None:
    """The tool an item's text leads with, or None when it leads with no name: a field
    label ("Rationale:"), or a sentence. In a sentence, the first `code` span is the name."""
    text = _NUMBERING.sub("", text.strip())  # "### 1. read-file"
    text = re.sub(r"^(?:\*\*|__)\s*\d{1,3}[.):]?\s*(?:\*\*|__)\s*", "", text)  # "**2.** read-file"
    plain = text.replace("**", "").replace("`", "").strip()
    if _TOOL_FIELD.match(_NUMBERING.sub("", plain)):
        text = re.sub(r"^.*?(?::|[-\u2013\u2014]\s)\s*(?:\*\*|__)?\s*", "", text, count=1)
        plain = text.replace("**", "").replace("`", "").strip()
    if _FIELD_LABELS.match(_NUMBERING.sub("", plain.lstrip("*_ "))):
        return None
    code = _CODE.match(text.lstrip("*_ "))
    if code is not None:
        return _clean_name(code.group(1)) or None
    bold = _BOLD.match(text)
    if bold is not None:
        inner = bold.group(1)
        code = _CODE.search(inner)
        name = _clean_name(code.group(1) if code else inner)
        return name if name and len(name.split()) <= MAX_EMPHASIZED_NAME_WORDS else None
    end = _PLAIN_END.search(plain)
    name = _clean_name(plain[: end.start()] if end else plain)
    word = _WORD_END.search(name)
    if word is not None and _IDENTIFIER.fullmatch(name[: word.start()]):
        name = name[: word.start()]
    if not _IDENTIFIER.fullmatch(name):
        code = _CODE.search(text)  # "The agent should have used `read-file` to ..."
        if code is not None:
            return _clean_name(code.group(1)) or None
    words = name.split()
    if not words or len(words) > MAX_PLAIN_NAME_WORDS or words[0].lower() in _SENTENCE_START:
        return None
    return name


def _tool_field_names(lines: list[str]) -> list[tuple[int, str]]:
    names = []
    for number, line in enumerate(lines):
        item = _LIST_ITEM.match(line)
        text = item.group("text") if item else line.strip().lstrip("#").strip()
        plain = text.replace("**", "").replace("__", "").replace("`", "").strip()
        plain = _NUMBERING.sub("", plain)
        if _TOOL_FIELD.match(plain) and not re.match(r"^(?:missing\s+)?(?:mcp\s+)?tools\b", plain, re.I):
            name = _name_in(text)
            if name:
                names.append((number, name))
    return names


def _heading_names(lines: list[str]) -> list[tuple[int, str]]:
    names = []
    for number, line in enumerate(lines):
        heading = _MARKDOWN_HEADING.match(line) or _BOLD_LINE.match(line)
        if heading is None:
            continue
        text = heading.group("text").rstrip("# \t")  # "## read-file ##"
        if _CODE.search(text) is None and _GENERIC_HEADING.search(text):
            continue
        name = _name_in(text)
        # A heading names a tool when numbered, in code, or written as an identifier;
        # "**Kubernetes**" over a list is a group, and the list holds the tools.
        numbered = _NUMBERING.match(text.lstrip("*_ ")) is not None
        if name and (numbered or _CODE.search(text) or _IDENTIFIER.fullmatch(name)):
            names.append((number, name))
    return names


def _list_names(lines: list[str]) -> list[tuple[int, str]]:
    """The names of the outermost list items: numbered ones when there are any (the
    prompt asks to number the tools), else bullets. Deeper items describe a tool."""
    items = [(number, _LIST_ITEM.match(line)) for number, line in enumerate(lines)]
    items = [(number, item) for number, item in items if item is not None]
    numbered = [(number, item) for number, item in items if item.group("mark")[0] not in "-*+•"]
    items = numbered or items
    if not items:
        return []
    outermost = min(len(item.group("indent").expandtabs(4)) for _, item in items)
    names = []
    for number, item in items:
        if len(item.group("indent").expandtabs(4)) == outermost:
            name = _name_in(item.group("text"))
            if name:
                names.append((number, name))
    return names


def parse_missing_tools(reply: str | None) -> list[ToolName]:
    """The tools a turn-2 reply recommends, in its order, each once (by key).

    The tools are read, in this order of preference, from "Tool name: X" lines, from
    headings naming one tool each (lists under them are the tool's reasons), or from the
    outermost list items. "No critical missing tools identified." (and its variants)
    before any tool gives none.
    """
    lines = (reply or "").splitlines()
    named = _tool_field_names(lines) or _heading_names(lines) or _list_names(lines)
    first_line = named[0][0] if named else len(lines)
    if any(_NO_TOOLS.search(line) for line in lines[: first_line]):
        return []
    tools: dict[str, ToolName] = {}
    for _, name in named:
        key = tool_key(name)
        if key and key not in tools:
            tools[key] = ToolName(name=name[:MAX_NAME_CHARS], key=key)
    return list(tools.values())
