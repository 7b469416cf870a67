import pytest

from grandbo.retrieval.fusion import RRF_K, rrf


def test_rrf_sums_reciprocal_ranks_with_k_60():
    fused = dict(rrf([["a", "b", "c"], ["c", "a"]]))
    assert RRF_K == 60
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert fused["b"] == pytest.approx(1 / 62)


def test_agreement_between_arms_beats_one_arm_first_place():
    ranked = [key for key, _ in rrf([["x", "both"], ["y", "both"]])]
    assert ranked[0] == "both"


def test_every_key_appears_once_and_ties_keep_first_seen_order():
    fused = rrf([["a", "b"], ["b", "a"], ["c"]])
    assert [key for key, _ in fused] == ["a", "b", "c"]
    assert len(rrf([["a", "a", "b"]])) == 2  # a repeated key counts once, at its best rank


def test_k_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        rrf([["a"]], k=0)
