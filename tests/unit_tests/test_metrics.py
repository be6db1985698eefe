

def test_bootstrap_ci_brackets_the_mean_and_narrows_with_more_questions() -> None:
    from active_rag.evaluation.metrics import bootstrap_ci

    assert bootstrap_ci([1.0]) is None
    assert bootstrap_ci([0.5] * 10) == (0.5, 0.5)
    small = bootstrap_ci([1.0, 0.0] * 10)
    large = bootstrap_ci([1.0, 0.0] * 200)
    assert small is not None and large is not None
    assert small[0] < 0.5 < small[1] and large[0] < 0.5 < large[1]
    assert large[1] - large[0] < small[1] - small[0]
    # the normal approximation of a proportion's interval: 0.5 +- 1.96 * sqrt(0.25 / 400) = +- 0.049
    assert abs((large[1] - large[0]) / 2 - 0.049) < 0.01
    assert bootstrap_ci([1.0, 0.0] * 10, seed=3) == bootstrap_ci([1.0, 0.0] * 10, seed=3)
