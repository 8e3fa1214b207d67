"""The HTML page of a report: self-contained (figures embedded as data URIs, no external assets).

On load, a small script checks that every figure decoded (`naturalWidth > 0`) and records the count in
`<body data-figures="ok:N">` (or `broken:K`), and records the layout (page and window width, where the
summary sits) in `data-layout` as JSON; the browser test reads both.
"""

from __future__ import annotations

import jinja2
from markupsafe import Markup, escape
import pandas as pd

from mecheval.report.decide import COMPARISONS, NOT_REPRODUCED, REPRODUCED

TEMPLATE = jinja2.Environment(autoescape=True).from_string(  # every string from a file is escaped
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1160px; padding: 0 1em; color: #222; }
h1 { margin: 0 0 0.3em; font-size: 1.7em; } h2 { margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 13px; margin: 0.5em 0 1.2em; width: 100%; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top; overflow-wrap: break-word; }
th { background: #f3f3f3; } td.num { text-align: right; white-space: nowrap; }
td.agree, td.reproduced { background: #e3f6e3; } td.differ, td.not-reproduced { background: #fbe3e3; }
td.inconclusive { background: #fbf3d9; }
#summary { background: #f7f9fc; border: 1px solid #dde3ee; padding: 0.2em 1em; }
#summary h2 { margin-top: 0.6em; }
details { margin: -0.6em 0 1.2em; } details > div { overflow-x: auto; }
div.table { overflow-x: auto; } details table { width: auto; } details td { overflow-wrap: normal; white-space: nowrap; }
figure { display: inline-block; margin: 0.5em; vertical-align: top; max-width: 540px; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 12px; color: #444; }
.meta { color: #555; font-size: 14px; }
</style></head>
<body data-figures="pending" data-layout="pending">
<h1>{{ title }}</h1>
<p class="meta">{{ meta.get("description", "") }}{% if meta.get("wall_time_line") %}<br>{{ meta["wall_time_line"] }}{% endif %}</p>
<section id="summary"><h2>Summary</h2><p>{{ overview }}</p>
{{ table_html(glance) }}</section>
<h2>How to read this</h2><p>{{ how_to_read }}</p>
{% if example %}<figure><img alt="how to read" src="data:image/png;base64,{{ example[0] }}">
<figcaption>{{ example[1] }}</figcaption></figure>{% endif %}
{% for s in sections %}
<h2>{{ s.head }}</h2><p>{{ s.note }}</p>
{{ table_html(s.table) }}
{% if s.raw is not none %}<details><summary>Every column (as in summary.csv)</summary><div>{{ table_html(s.raw) }}</div></details>{% endif %}
{% endfor %}
<p>Data: <a href="runs.parquet">runs.parquet</a> (every run: config and metrics), <a href="summary.csv">summary.csv</a>
(the table above), and each run's <code>interventions.parquet</code> under <code>runs/</code>.</p>
<h2>Figures</h2>
{% for name, (data, text) in images.items() %}
<figure><img alt="{{ name }}" src="data:image/png;base64,{{ data }}"><figcaption><b>{{ name }}.</b> {{ text }}</figcaption></figure>
{% endfor %}
<script>
window.addEventListener("load", () => {
  const imgs = [...document.images];
  const broken = imgs.filter((i) => !(i.complete && i.naturalWidth > 0)).length;
  document.body.dataset.figures = broken ? `broken:${broken}` : `ok:${imgs.length}`;
  const summary = document.getElementById("summary").getBoundingClientRect();
  document.body.dataset.layout = JSON.stringify({
    scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
    innerHeight: window.innerHeight, summaryTop: summary.top, summaryBottom: summary.bottom});
});
</script>
</body></html>
"""
)


def table_html(table: pd.DataFrame) -> Markup:
    """A table with agree/differ and reproduced/inconclusive/not-reproduced cells classed for colour;
    every header and cell escaped; one wider than the page scrolls in its own box."""
    if table.empty:
        return Markup("<p>(none)</p>")
    rows = ['<div class="table"><table><tr>' + "".join(f"<th>{escape(c)}</th>" for c in table.columns) + "</tr>"]
    for _, r in table.iterrows():
        cells = []
        for v in r:
            text = str(v)
            cls = text.replace(" ", "-") if text in (*COMPARISONS, REPRODUCED, NOT_REPRODUCED) else (
                "num" if _is_number(text) else "")
            cells.append(f'<td class="{cls}">{escape(text)}</td>' if cls else f"<td>{escape(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return Markup("\n".join(rows) + "</table></div>")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def render_html(title: str, meta: dict, overview: str, glance: pd.DataFrame, how_to_read: str,
                example: tuple[str, str] | None, sections: list, images: dict[str, tuple[str, str]]) -> str:
    """sections: `build.Section`s; example and images: (base64 PNG, caption)."""
    return TEMPLATE.render(title=title, meta=meta, overview=overview, glance=glance, how_to_read=how_to_read,
                           example=example, sections=sections, images=images, table_html=table_html)
