"""The layout check every figure job runs (methods.report.figure_layout): hand-made figures with
one known fault each, and the same figures without it."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from methods.report.figure_layout import layout_problems, save_figure  # noqa: E402


def _plot():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1, 2, 3], [0, 1, 2, 3], marker="o", label="line")
    ax.set_title("a title")
    ax.set_xlabel("x")
    return fig, ax


def test_a_clean_figure_has_no_problem():
    fig, ax = _plot()
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))   # beside the axes
    fig.tight_layout()
    assert layout_problems(fig) == []


def test_text_outside_the_canvas_is_found():
    fig, _ = _plot()
    fig.text(0.9, 0.5, "a note that runs far past the right edge of the canvas")
    assert any("reaches outside the canvas" in p and "a note" in p for p in layout_problems(fig))


def test_overlapping_texts_are_found_but_not_slanted_neighbours():
    fig, ax = _plot()
    fig.text(0.5, 0.955, "a subtitle over the title", ha="center", va="top", fontsize=12)
    ax.set_title("a title placed under it", fontsize=12)
    fig.subplots_adjust(top=0.88)
    assert any("overlap" in p for p in layout_problems(fig))
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(range(6), [1] * 6)
    ax.set_xticks(range(6), ["background"] * 6, rotation=45, ha="right")   # slanted: upright boxes overlap
    fig.tight_layout()
    assert layout_problems(fig) == []


def test_a_legend_over_the_data_is_found(tmp_path, capsys):
    fig, ax = _plot()
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, 1.0), fontsize=20, markerscale=3)
    ax.plot([0.1, 0.2], [2.9, 2.8], "o")   # points under the legend
    problems = save_figure(fig, str(tmp_path / "f.png"))
    assert any("a legend covers" in p for p in problems)
    assert (tmp_path / "f.png").stat().st_size > 0   # saved all the same, the problems in the log
    assert f"layout: {tmp_path / 'f.png'}: a legend covers" in capsys.readouterr().out
