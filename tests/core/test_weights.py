"""The workload weights: parsed from the option's text, a file or a mapping, normalised over the datasets present."""

from __future__ import annotations

import json

import pytest

from lengthlens.analyses.weights import EQUAL, parse_weights
from lengthlens.data.errors import InputError


def test_equal_by_default_and_by_name():
    assert parse_weights(None) is EQUAL
    assert parse_weights("equal").equal
    assert EQUAL.normalised(["a", "b", "c", "a"]) == {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}


def test_inline_pairs_normalise_over_present_datasets():
    w = parse_weights("gsm8k=3, aime24=1")
    assert w.normalised(["aime24", "gsm8k"]) == {"aime24": 0.25, "gsm8k": 0.75}
    # a dataset the weights leave out weighs 0 and is named
    assert w.normalised(["aime24", "gsm8k", "mtbench"])["mtbench"] == 0.0
    assert w.unweighted(["aime24", "gsm8k", "mtbench"]) == ("mtbench",)
    assert w.describe() == "weights gsm8k=3, aime24=1"


def test_weight_on_a_dataset_not_run_is_refused_naming_it():
    with pytest.raises(InputError, match="humaneval"):
        parse_weights("gsm8k=1,humaneval=2").normalised(["gsm8k"])
    # weight 0 on an absent dataset is harmless
    assert parse_weights("gsm8k=1,humaneval=0").normalised(["gsm8k"]) == {"gsm8k": 1.0}


@pytest.mark.parametrize("text, says", [("gsm8k", "dataset=weight"), ("gsm8k=x", "not a number"),
                                         ("gsm8k=-1", "at least 0"), ("gsm8k=inf", "finite"),
                                         ("gsm8k=1,gsm8k=2", "twice"), ("=1", "not dataset=weight")])
def test_bad_inline_weights_say_why(text, says):
    with pytest.raises(InputError, match=says):
        parse_weights(text)


def test_all_zero_over_present_datasets_is_refused():
    with pytest.raises(InputError, match="weight 0"):
        parse_weights("gsm8k=0,aime24=0").normalised(["gsm8k", "aime24"])


def test_files(tmp_path):
    (tmp_path / "w.json").write_text(json.dumps({"gsm8k": 2, "aime24": 2}))
    (tmp_path / "w.yaml").write_text("gsm8k: 1\naime24: 3\n")
    (tmp_path / "w.csv").write_text("dataset,weight\ngsm8k,1\naime24,1\n")
    assert parse_weights(str(tmp_path / "w.json")).normalised(["gsm8k", "aime24"]) == {"gsm8k": 0.5, "aime24": 0.5}
    assert parse_weights(tmp_path / "w.yaml").normalised(["gsm8k", "aime24"])["aime24"] == 0.75
    assert parse_weights(str(tmp_path / "w.csv")).source == "from w.csv"
    (tmp_path / "bad.csv").write_text("dataset,weight\ngsm8k,1\naime24,lots\n")
    with pytest.raises(InputError, match=r"bad.csv, line 3, field weight"):
        parse_weights(str(tmp_path / "bad.csv"))
    (tmp_path / "bad.json").write_text("{\n  \"gsm8k\": 1,\n}")
    with pytest.raises(InputError, match=r"bad.json, line 3"):
        parse_weights(str(tmp_path / "bad.json"))
    with pytest.raises(InputError, match="cannot read"):
        parse_weights(str(tmp_path / "absent.json"))


def test_mapping():
    assert parse_weights({"a": 1, "b": 3}).normalised(["a", "b"]) == {"a": 0.25, "b": 0.75}
    with pytest.raises(InputError, match="no weights"):
        parse_weights({})
