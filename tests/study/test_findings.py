"""Each published finding's check: reproduced on rows that show it, not reproduced on rows that break
it, `not run` without the architectures it names."""

import pandas as pd
import pytest

from mecheval.study.findings import FINDINGS


def runs(*rows) -> pd.DataFrame:
    cols = ["arch", "acc", "verdict", "attrib@value", "attrib@query", "attrib@key", "chance"]
    df = pd.DataFrame([dict(zip(cols, r)) for r in rows], columns=cols)
    df["model.d_model"] = 64
    return df


IND, DIR, NL = "induction", "direct retrieval", "not learned"
CASES = {  # finding: (rows that reproduce it, rows that do not)
    "attention_induction": (runs(("attention", 1.0, IND, 1.0, 0.0, 0.0, 0.25)),
                            runs(("attention", 1.0, DIR, 0.0, 1.0, 0.0, 0.25))),
    "based_induction": (runs(("based", 0.99, IND, 0.95, 0.0, 0.0, 0.25)), runs(("based", 0.5, IND, 0.95, 0.0, 0.0, 0.25))),
    "mamba_direct": (runs(("mamba", 0.9, DIR, 0.0, 0.6, 0.4, 0.25)), runs(("mamba", 0.9, IND, 0.9, 0.0, 0.0, 0.25))),
    "mamba_noconv_fails": (runs(("mamba (d_conv 0)", 0.26, NL, 0.3, 0.0, 0.9, 0.25), ("mamba (d_conv 1)", 0.3, NL, 0, 0, 0, 0.25)),
                           runs(("mamba (d_conv 0)", 0.26, NL, 0.3, 0.0, 0.9, 0.25), ("mamba (d_conv 1)", 0.9, DIR, 0, 1, 0, 0.25))),
    "based_long_fails": (runs(("based (d_conv long)", 0.25, NL, 0, 0, 0, 0.25)), runs(("based (d_conv long)", 0.9, IND, 1, 0, 0, 0.25))),
    "h3_hyena_poor": (runs(("h3", 0.02, NL, 0, 0, 0, 0.25), ("hyena", 0.3, DIR, 0, 1, 0, 0.25)),
                      runs(("h3", 0.93, DIR, 0, 0.3, 0.6, 0.25), ("hyena", 0.3, DIR, 0, 1, 0, 0.25))),
    "atr_mamba_vs_attention": (runs(("mamba", 0.87, DIR, 0, 0.4, 0.6, 0.05), ("attention", 0.78, IND, 1, 0, 0, 0.05)),
                               runs(("mamba", 0.70, DIR, 0, 0.4, 0.6, 0.05), ("attention", 0.78, IND, 1, 0, 0, 0.05))),
    "atr_storage": (runs(("attention", 0.8, IND, 1.0, 0, 0, 0.05), ("based", 0.8, IND, 0.95, 0, 0, 0.05),
                         ("mamba", 0.9, DIR, 0.01, 0.4, 0.6, 0.05), ("h3", 0.8, DIR, 0.03, 0.5, 0.5, 0.05)),
                    runs(("attention", 0.8, IND, 1.0, 0, 0, 0.05), ("mamba", 0.9, "mixed", 0.5, 0.2, 0.3, 0.05))),
    "atr_mamba_noconv_induction": (runs(("mamba (d_conv 0)", 0.75, "mixed", 0.52, 0.26, 0.2, 0.05)),
                                   runs(("mamba (d_conv 0)", 0.75, DIR, 0.1, 0.6, 0.3, 0.05))),
}


def test_every_finding_has_a_case():
    assert set(CASES) == set(FINDINGS)


@pytest.mark.parametrize("finding", list(CASES))
def test_finding_reproduces_only_where_the_rows_show_it(finding):
    shows, breaks = CASES[finding]
    check = FINDINGS[finding].check
    assert check(shows).status == "reproduced"
    assert check(breaks).status == "not reproduced"
    assert check(runs(("deltanet", 1.0, DIR, 0, 0, 1, 0.25))).status == "not run"
