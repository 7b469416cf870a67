"""Memory bodies drawn as Markdown (CommonMark, by markdown-it-py), safely: HTML in the source is escaped as
text, images are not drawn (the console loads nothing from elsewhere), and a link is one only when it is an
absolute http(s) URL (never javascript:, data: or vbscript:); any other stays text."""

from __future__ import annotations

from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from markupsafe import Markup

from grandbo.web.links import web_link

_PARSER = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).disable("image")
_PARSER.validateLink = web_link  # type: ignore[method-assign]


def _link_open(renderer: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    tokens[idx].attrSet("rel", "noopener noreferrer")
    return renderer.renderToken(tokens, idx, options, env)


_PARSER.add_render_rule("link_open", _link_open)


def markdown(text: str) -> Markup:
    """The body as HTML: every character of the source escaped unless Markdown's syntax drew it."""
    return Markup(_PARSER.render(text or ""))  # noqa: S704 (html off: the source is escaped)
