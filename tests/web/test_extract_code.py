"""Docs pages: code blocks keep every token a highlighter marks up. Each page is small and
hand-made, showing one general shape."""

from __future__ import annotations

from specialists.extract import extract_article, switched_off

PROSE = [
    "A function declaration binds a name to a function object, and the name can be used "
    "before the declaration because declarations are hoisted to the top of their scope.",
    "Arguments are passed by value, but when the value is an object its properties can be "
    "changed by the function, and the caller then sees the changed object after the call.",
    "A function that calls itself is recursive; give it a base case that stops the calls, "
    "or it runs until the engine throws a range error for exceeding the maximum call stack.",
]
CODE = (
    "<pre class='language-js'><code>"
    "<span class='token keyword'>function</span> square(n) {\n"
    "  <span class='hljs-comment'>// the product of n with itself</span>\n"
    "  <span class='token meta'>return</span> n * n;\n"
    "}\n"
    "<span class='token tag'>&lt;button&gt;</span>Share<span class='token tag'>&lt;/button&gt;"
    "</span></code></pre>"
)


def docs_page(inner: str) -> str:
    """A docs page: a sidebar, then an article of prose around `inner`."""
    return (
        "<html><body><nav class='sidebar'><a href='/a'>Intro</a><a href='/b'>Functions</a></nav>"
        f"<main><article><h1>Functions</h1><p>{PROSE[0]}</p>{inner}<p>{PROSE[1]}</p>"
        f"<p>{PROSE[2]}</p></article></main></body></html>"
    )


def test_a_highlighters_token_classes_inside_code_never_name_chrome() -> None:
    markdown = extract_article(docs_page(CODE)).markdown
    assert "  // the product of n with itself\n  return n * n;" in markdown
    assert "<button>Share</button>" in markdown
    with switched_off({"code-tokens"}):  # "comment", "meta", "tag" name chrome elsewhere
        assert "the product of n" not in extract_article(docs_page(CODE)).markdown


def test_a_chrome_class_outside_code_still_names_chrome() -> None:
    ad = "<div class='comment-form'><p>Leave a comment below and we answer within a day.</p></div>"
    assert "Leave a comment" not in extract_article(docs_page(CODE + ad)).markdown
