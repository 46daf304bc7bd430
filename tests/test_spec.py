"""The textual method spec: round trips and errors that name the field."""
import pytest

from magicpig import parse_method
from magicpig.methods import METHODS, method_fields


@pytest.mark.parametrize("spec", ["dense", "magicpig", "magicpig:K=10,L=150", "magicpig:K=8,L=75,centering=false",
                                  "magicpig:min_collisions=1,share_projections=true,dense_layers=0;3",
                                  "quest:page_size=16,ratio=0.04", "topk:budget=0.02", "topk:budget=64",
                                  "oracle:budget=0.05", "streaming:sinks=4,local=128", "magicpig:dense_layers=none"])
def test_round_trip(spec):
    m = parse_method(spec)
    assert parse_method(m.spec()) == m
    assert parse_method(m.spec()).spec() == m.spec()


def test_values_are_typed():
    m = parse_method(" magicpig: K = 9 , L=120, centering=off ")
    assert (m.K, m.L, m.centering) == (9, 120, False)
    assert parse_method("topk:budget=64").budget == 64.0
    assert parse_method("magicpig:dense_layers=0;16").dense_layers == (0, 16)


@pytest.mark.parametrize("spec,pattern", [
    ("nope", "unknown attention method 'nope'.*magicpig"),
    ("magicpig:k=10", "no field 'k'.*K, L"),
    ("magicpig:K=ten", "field 'K' expects int"),
    ("magicpig:K=0", "K must"),
    ("magicpig:K=16,L=1000", "K\\*L"),
    ("magicpig:L=1", "min_collisions"),
    ("magicpig:centering=maybe", "field 'centering' expects bool"),
    ("magicpig:K", "expected field=value"),
    ("magicpig:K=10,K=11", "given twice"),
    ("quest:ratio=0", "'ratio'"),
    ("quest:page_size=0", "'page_size'"),
    ("topk:budget=-1", "'budget'"),
    ("streaming:sinks=-1", "'sinks'"),
    ("", "non-empty"),
])
def test_bad_specs_name_the_problem(spec, pattern):
    with pytest.raises(ValueError, match=pattern):
        parse_method(spec)


def test_every_method_lists_its_fields():
    for name in METHODS:
        fields = [f for f, _, _ in method_fields(name)]
        assert "dense_layers" in fields


def test_cli_lists_methods(capsys):
    from magicpig.cli import main

    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    for name in METHODS:
        assert f"{name}:" in out
    assert "min_collisions" in out
