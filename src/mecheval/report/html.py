"""The HTML page of a report: self-contained (figures embedded as data URIs, no external assets).

On load, a small script checks that every figure decoded (`naturalWidth > 0`) and records the count in
`<body data-figures="ok:N">` (or `broken:K`), which the browser test reads.
"""

from __future__ import annotations

import jinja2
from markupsafe import escape
import pandas as pd

TEMPLATE = jinja2.Template(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; font-size: 13px; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
th { background: #f3f3f3; } td.num { text-align: right; }
td.agree, td.reproduced { background: #e3f6e3; } td.disagree, td.not-reproduced { background: #fbe3e3; }
figure { display: inline-block; margin: 0.5em; vertical-align: top; }
figure img { max-width: 520px; border: 1px solid #ddd; }
figcaption { font-size: 12px; color: #555; }
</style></head>
<body data-figures="pending">
<h1>{{ title }}</h1>
<p>{{ meta.get("description", "") }}</p>
{% if meta.get("wall_time_s") %}<p>Wall time: {{ "%.1f"|format(meta["wall_time_s"] / 60) }} min
({{ meta.get("cpu_drops", "") }}).</p>{% endif %}
{% for head, table, note in sections %}
<h2>{{ head }}</h2><p>{{ note }}</p>
{{ table_html(table) }}
{% endfor %}
<h2>Figures</h2>
{% for name, data in images.items() %}
<figure><img alt="{{ name }}" src="data:image/png;base64,{{ data }}"><figcaption>{{ name }}</figcaption></figure>
{% endfor %}
<script>
window.addEventListener("load", () => {
  const imgs = [...document.images];
  const broken = imgs.filter((i) => !(i.complete && i.naturalWidth > 0)).length;
  document.body.dataset.figures = broken ? `broken:${broken}` : `ok:${imgs.length}`;
});
</script>
</body></html>
"""
)


def table_html(table: pd.DataFrame) -> str:
    """A table with agree/disagree and reproduced/not-reproduced cells classed for colour."""
    if table.empty:
        return "<p>(none)</p>"
    rows = ["<table><tr>" + "".join(f"<th>{escape(c)}</th>" for c in table.columns) + "</tr>"]
    for _, r in table.iterrows():
        cells = []
        for v in r:
            text = str(v)
            cls = text.replace(" ", "-") if text in ("agree", "disagree", "reproduced", "not reproduced") else (
                "num" if _is_number(text) else "")
            cells.append(f'<td class="{cls}">{escape(text)}</td>' if cls else f"<td>{escape(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join(rows) + "</table>"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def render_html(title: str, meta: dict, sections: list[tuple[str, pd.DataFrame, str]], images: dict[str, str]) -> str:
    """images: caption -> base64 PNG."""
    return TEMPLATE.render(title=title, meta=meta, sections=sections, images=images, table_html=table_html)
