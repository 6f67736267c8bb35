"""The report as one self-contained HTML file: styles inline, plots embedded as ``data:`` URIs, no script and
nothing fetched, so it opens from a mail, a CI artifact or a laptop without network. Every text is escaped."""

from __future__ import annotations

import base64
import re
from html import escape

from gpufleet.sim.report.build import BulletsBlock, FigureBlock, Report, TableBlock

STYLE = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328; margin: 2rem auto;
       max-width: 72rem; padding: 0 1rem; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2rem; border-bottom: 1px solid #d0d7de; }
table { border-collapse: collapse; margin: 0.8rem 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #d0d7de; padding: 0.25rem 0.6rem; vertical-align: top; }
th { background: #f6f8fa; text-align: left; }
td.num, th.num { text-align: right; }
figure { margin: 1rem 0; } figure img { max-width: 100%; height: auto; }
figcaption { color: #59636e; font-size: 0.9rem; }
.missing { color: #9a6700; }
"""

_EMPHASIS = re.compile(r"\*([^*\n]+)\*")
_CODE = re.compile(r"`([^`\n]+)`")


def inline(text: str) -> str:
    """A paragraph's text as HTML: escaped, then ``*emphasis*`` and ```code``` as the Markdown file has them."""
    html = escape(text)
    html = _CODE.sub(r"<code>\1</code>", html)
    return _EMPHASIS.sub(r"<em>\1</em>", html)


def _table(t: TableBlock) -> str:
    def cell(tag: str, text: str, numeric: bool) -> str:
        return f"<{tag}{' class=num' if numeric else ''}>{escape(text)}</{tag}>"

    head = "".join(cell("th", h, n) for h, n in zip(t.header, t.numeric, strict=True))
    body = "".join("<tr>" + "".join(cell("td", c, n) for c, n in zip(row, t.numeric, strict=True)) + "</tr>"
                   for row in t.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(f: FigureBlock, png: bytes | None) -> str:
    if png is None:
        return f'<p class="missing">{escape(f.alt)}: plot missing</p>'
    data = base64.b64encode(png).decode("ascii")
    caption = f"<figcaption>{escape(f.caption)}</figcaption>" if f.caption else ""
    return f'<figure><img alt="{escape(f.alt)}" src="data:image/png;base64,{data}">{caption}</figure>'


def to_html(report: Report, images: dict[str, bytes]) -> str:
    """The whole page; ``images`` maps a figure's file name to its PNG bytes."""
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{escape(report.title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
             f"<h1>{escape(report.title)}</h1>"]
    parts += [f"<p>{inline(p)}</p>" for p in report.intro]
    for section in report.sections:
        parts.append(f"<section><h2>{escape(section.title)}</h2>")
        for block in section.blocks:
            if isinstance(block, str):
                parts.append(f"<p>{inline(block)}</p>")
            elif isinstance(block, TableBlock):
                parts.append(_table(block))
            elif isinstance(block, FigureBlock):
                parts.append(_figure(block, images.get(block.file)))
            elif isinstance(block, BulletsBlock):
                parts.append("<ul>" + "".join(f"<li>{inline(i)}</li>" for i in block.items) + "</ul>")
        parts.append("</section>")
    parts += ["</body>", "</html>", ""]
    return "\n".join(parts)
