"""Markdown written by an LLM, made safe to put in a page.

The judge's analyses and the agent's final analysis are model output: they can
hold raw HTML, scripts, event-handler attributes and ``javascript:`` links,
whether by accident or because an alert smuggled them in. They are rendered
in two steps, each enough on its own:

1. markdown-it (CommonMark + tables) with raw HTML turned off, so any HTML in
   the text comes out escaped, as text;
2. nh3 (the ammonia sanitizer) with an allow-list of tags, attributes and URL
   schemes, so nothing but plain formatting can come out of step 1 either.
"""

import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

ALLOWED_TAGS = {
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "code", "pre",
    "blockquote", "ul", "ol", "li", "a", "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"style"}, "td": {"style"}}
ALLOWED_URL_SCHEMES = {"http", "https", "mailto"}
# Table alignment is the only inline style markdown-it writes.
ALLOWED_CSS_PROPERTIES = {"text-align"}

_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")


def render_markdown(text: str | None) -> SafeString:
    """Sanitized HTML for Markdown ``text`` ("" for None)."""
    if not text:
        return mark_safe("")
    html = _markdown.render(text)
    return mark_safe(  # noqa: S308 - sanitized by nh3 just above
        nh3.clean(
            html,
            tags=ALLOWED_TAGS,
            attributes=ALLOWED_ATTRIBUTES,
            url_schemes=ALLOWED_URL_SCHEMES,
            filter_style_properties=ALLOWED_CSS_PROPERTIES,
            link_rel="noopener noreferrer nofollow",
        )
    )
