"""LLM text rendered as Markdown: formatting kept, anything executable removed."""

from html.parser import HTMLParser

import pytest

from scoring.markdown import render_markdown


class Elements(HTMLParser):
    """Every element and attribute of an HTML fragment, as a browser would parse them."""

    def __init__(self, html: str):
        super().__init__()
        self.found: list[tuple[str, dict]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))

    @property
    def tags(self) -> set[str]:
        return {tag for tag, _ in self.found}

    def attributes(self) -> set[str]:
        return {name for _, attrs in self.found for name in attrs}

    def hrefs(self) -> list[str]:
        return [attrs["href"] for tag, attrs in self.found if tag == "a" and "href" in attrs]


def test_markdown_formatting_is_rendered():
    html = render_markdown(
        "## Verdict\n\n**Root cause** found with `kubectl`.\n\n1. one\n2. two\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |"
    )
    assert "<h2>Verdict</h2>" in html
    assert "<strong>Root cause</strong>" in html and "<code>kubectl</code>" in html
    assert {"ol", "li", "table", "th", "td"} <= Elements(html).tags


@pytest.mark.parametrize(
    "text",
    [
        "<script>alert('x')</script>",
        "Score: <img src=x onerror=alert(1)> 40",
        '<a href="javascript:alert(1)" onclick="alert(2)">click</a>',
        "<iframe src='https://example.com'></iframe>",
        "<svg onload=alert(1)></svg>",
        "<style>body{display:none}</style>",
        "<div><script>alert(1)</script></div>",
    ],
)
def test_raw_html_in_llm_text_comes_out_as_text(text):
    html = render_markdown(text)
    elements = Elements(html)
    assert not elements.tags & {"script", "img", "iframe", "svg", "style", "div"}
    assert not any(name.startswith("on") for name in elements.attributes())
    assert not any(href.lower().startswith("javascript:") for href in elements.hrefs())
    assert "&lt;" in html  # shown to the reader, not dropped silently


@pytest.mark.parametrize(
    "link",
    [
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](vbscript:msgbox(1))",
        "[x](data:text/html,<script>1</script>)",
    ],
)
def test_dangerous_link_schemes_never_become_links(link):
    assert Elements(render_markdown(link)).hrefs() == []


def test_safe_links_are_kept_and_do_not_pass_the_opener():
    html = render_markdown("See [the runbook](https://runbooks.example.com/ns) or <mailto:sre@example.com>.")
    elements = Elements(html)
    assert elements.hrefs() == ["https://runbooks.example.com/ns", "mailto:sre@example.com"]
    assert all("noopener" in attrs["rel"] for tag, attrs in elements.found if tag == "a")


def test_html_inside_code_stays_visible_as_code():
    html = render_markdown("```\n<script>alert(1)</script>\n```")
    assert "<pre><code>&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_empty_text_renders_nothing():
    assert render_markdown(None) == "" and render_markdown("") == ""
