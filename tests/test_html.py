"""The Markdown → HTML pages of methods/report/html.py, against hand-written HTML."""
import base64

from methods.report import html


def test_a_table_with_escaped_pipes_code_and_emphasis():
    md = "| row | value |\n|---|---|\n| a \\| b | `x*y` and **bold** |\n| *it* <b> & | 1.0 / 2.0Σ |\n"
    assert html.markdown_to_html(md) == (
        '<div class="scroll"><table>\n<thead><tr><th>row</th><th>value</th></tr></thead>\n<tbody>\n'
        "<tr><td>a | b</td><td><code>x*y</code> and <strong>bold</strong></td></tr>\n"
        "<tr><td><em>it</em> &lt;b&gt; &amp;</td><td>1.0 / 2.0Σ</td></tr>\n"
        "</tbody></table></div>\n")


def test_headings_paragraph_lines_and_lists():
    md = ("# Title: *x*\n\nFirst line.\nSecond line.\n- one\n  continued\n- two\n\n1. first\n2. second\n"
          "## Sub `code`\ntext with a lone ` backtick\n")
    assert html.markdown_to_html(md) == (
        '<h1 id="title-x">Title: <em>x</em></h1>\n'
        "<p>First line.<br>\nSecond line.</p>\n"
        "<ul>\n<li>one<br>continued</li>\n<li>two</li>\n</ul>\n"
        "<ol>\n<li>first</li>\n<li>second</li>\n</ol>\n"
        '<h2 id="sub-code">Sub <code>code</code></h2>\n'
        "<p>text with a lone ` backtick</p>\n")


def test_a_page_embeds_its_figures_beside_the_text(tmp_path):
    png = tmp_path / "fig_synthetic.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    page = html.page("Paper on synthetic", [(None, "# Report"), ("t_synthetic.md", "# t on synthetic")], [png])
    assert page.startswith("<!DOCTYPE html>") and "<title>Paper on synthetic</title>" in page
    assert page.index("<h1") < page.index('data-source="t_synthetic.md"') < page.index("<aside>")
    assert f'src="data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()}"' in page
    assert "<figcaption>fig_synthetic.png</figcaption>" in page
    assert 'class="text-only"' in html.markdown_page("# Only text\n") and "<aside>" not in html.markdown_page("# t\n")


def test_the_page_command_writes_the_report_then_its_tables(tmp_path):
    (tmp_path / "r.md").write_text("# Reproduction report: P on d\n")
    (tmp_path / "t_d.md").write_text("# t on d\n\n| row |\n|---|\n| a |\n")
    out = tmp_path / "r.html"
    html.main(["--title", "P on d", "--out", str(out), "--markdown", str(tmp_path / "r.md"), str(tmp_path / "t_d.md"),
               "--figures"])
    text = out.read_text()
    assert text.index("Reproduction report: P on d") < text.index("t on d") < text.index("<td>a</td>")
