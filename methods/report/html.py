"""HTML pages of the harness's Markdown: the tables, the reproduction reports, the claims tables, the
summary and the runtime table, as ``snakemake --report`` shows them inline (it shows an HTML result
in a frame; a ``.md`` or ``.csv`` result is only a download).

Rendered from the Markdown text the same job wrote, so a page says what its ``.md`` says. The
renderer covers what the harness writes (no general Markdown): ``#`` headings, paragraphs (one
statement per line, so a line break stays one), ``-`` and ``1.`` lists (an indented line continues
an item), pipe tables (``\\|`` is a pipe inside a cell), ``**bold**``, ``*italic*`` and
`` `code` ``. Every other character is text, escaped. A page embeds its figures (PNG, as data
URIs): the report is one file and a page shows the figures beside the text.
"""
from __future__ import annotations

import argparse
import base64
import html
import re
from pathlib import Path

from methods.cli import run_command
from methods.io import write_text

HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
BULLET = re.compile(r"^[-*]\s+(.*)$")
NUMBERED = re.compile(r"^\d+\.\s+(.*)$")
TABLE_RULE = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
EMPHASIS = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|\*(?=[^\s*])(.+?)(?<=[^\s*])\*")

STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1b1b1b; margin: 0; }
main { display: grid; grid-template-columns: minmax(0, 1fr) minmax(280px, 38%); gap: 24px; padding: 16px 24px; }
main.text-only { grid-template-columns: minmax(0, 1fr); }
aside figure { margin: 0 0 20px 0; }
aside img { width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { font-size: 13px; color: #555; }
h1 { font-size: 22px; } h2 { font-size: 19px; margin-top: 28px; } h3 { font-size: 16px; }
table { border-collapse: collapse; margin: 8px 0 16px 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f1f3f5; position: sticky; top: 0; }
tbody tr:nth-child(even) { background: #fafafa; }
.scroll { overflow-x: auto; }
code { font-size: 90%; background: #f3f3f3; padding: 0 3px; border-radius: 3px; }
section.source { border-top: 2px solid #e0e0e0; margin-top: 28px; }
@media (max-width: 900px) { main { grid-template-columns: minmax(0, 1fr); } }
"""


def inline(text: str) -> str:
    """One line of Markdown text as HTML: code spans kept as written, emphasis outside them."""
    parts = text.split("`")
    if len(parts) % 2 == 0:   # an unpaired backtick is a character
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"<code>{html.escape(part)}</code>")
        else:
            out.append(EMPHASIS.sub(lambda m: (f"<strong>{m.group(1)}</strong>" if m.group(1) is not None
                                               else f"<em>{m.group(2)}</em>"), html.escape(part, quote=False)))
    return "".join(out)


def table_cells(line: str) -> list[str]:
    """The cells of one pipe-table line (``\\|`` is a pipe in a cell)."""
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)]


def render_table(lines: list[str]) -> str:
    header, body = table_cells(lines[0]), [table_cells(line) for line in lines[2:]]
    head = "".join(f"<th>{inline(c)}</th>" for c in header)
    rows = "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in cells) + "</tr>\n" for cells in body)
    return f'<div class="scroll"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}</tbody></table></div>\n'


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def table_starts(lines: list[str], i: int) -> bool:
    """Whether a pipe table starts at line ``i``: a row, then its rule line."""
    return lines[i].lstrip().startswith("|") and i + 1 < len(lines) and bool(TABLE_RULE.match(lines[i + 1].strip()))


def markdown_to_html(markdown: str) -> str:
    """The HTML of the Markdown the harness writes (module doc)."""
    lines = markdown.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif m := HEADING.match(line):
            level, text = len(m.group(1)), m.group(2).strip()
            out.append(f'<h{level} id="{slug(text)}">{inline(text)}</h{level}>\n')
            i += 1
        elif table_starts(lines, i):
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            out.append(render_table(lines[i:j]))
            i = j
        elif BULLET.match(line) or NUMBERED.match(line):
            pattern, tag = (BULLET, "ul") if BULLET.match(line) else (NUMBERED, "ol")
            items: list[list[str]] = []
            while i < len(lines) and lines[i].strip():
                if m := pattern.match(lines[i]):
                    items.append([m.group(1)])
                elif lines[i][:1].isspace() and items:   # an indented line continues the item
                    items[-1].append(lines[i].strip())
                else:
                    break
                i += 1
            out.append(f"<{tag}>\n" + "".join(f"<li>{'<br>'.join(inline(t) for t in item)}</li>\n" for item in items)
                       + f"</{tag}>\n")
        else:
            paragraph = []
            while (i < len(lines) and lines[i].strip() and not HEADING.match(lines[i])
                   and not BULLET.match(lines[i]) and not NUMBERED.match(lines[i]) and not table_starts(lines, i)):
                paragraph.append(inline(lines[i].strip()))
                i += 1
            out.append("<p>" + "<br>\n".join(paragraph) + "</p>\n")
    return "".join(out)


def figure_html(path: Path) -> str:
    """A PNG embedded as a data URI, captioned with its file name."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    name = html.escape(path.name)
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{name}">'
            f"<figcaption>{name}</figcaption></figure>\n")


def page(title: str, sections: list[tuple[str | None, str]], figures: list[Path] = ()) -> str:
    """A self-contained page: each section's Markdown (under a ``source`` label: the file it came
    from), the figures in a column beside them."""
    body = "".join((f'<section class="source" data-source="{html.escape(source)}">\n' if source else "<section>\n")
                   + markdown_to_html(markdown) + "</section>\n" for source, markdown in sections)
    aside = f"<aside>\n{''.join(figure_html(f) for f in figures)}</aside>\n" if figures else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            f"<main class=\"{'' if figures else 'text-only'}\">\n<div>\n{body}</div>\n{aside}</main>\n</body>\n</html>\n")


def markdown_page(markdown: str) -> str:
    """The page of one Markdown text (a table, the summary): titled by its first heading."""
    first = next((m.group(2) for line in markdown.splitlines() if (m := HEADING.match(line))), "harness result")
    return page(first, [(None, markdown)])


def write_markdown(md_path: str, html_path: str | None, markdown: str) -> None:
    """A job's Markdown, and its page where the job is asked for one (``--out-html``)."""
    write_text(md_path, markdown)
    if html_path:
        write_text(html_path, markdown_page(markdown))


def build_page(args) -> None:
    """The page of a paper on a dataset: its reproduction report, then its tables and claims table,
    its figures beside them."""
    markdown = [Path(p) for p in args.markdown]
    sections = [(None if i == 0 else p.name, p.read_text(encoding="utf-8")) for i, p in enumerate(markdown)]
    write_text(args.out, page(args.title, sections, [Path(f) for f in args.figures]))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--title", required=True)
    parser.add_argument("--out", required=True, help="the page (.html)")
    parser.add_argument("--markdown", nargs="+", required=True, help="the report first, then the tables it rests on")
    parser.add_argument("--figures", nargs="*", default=[], help="PNG figures shown beside the text")


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, add_arguments, build_page, argv, dataset_config=False)


if __name__ == "__main__":
    main()
