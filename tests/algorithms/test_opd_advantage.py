"""On-policy distillation's advantage (algorithms/distill/opd_advantage.py), by hand.

            token 0   token 1   token 2
    ℓ_S  r0: -1.0     -2.0      -0.5        r1: -0.3   -1.0   (pad)
    ℓ_T  r0: -0.5     -2.5      -0.5        r1: -1.3   -0.5   (pad: 9.0, must not leak)
    r    r0:  0.5     -0.5       0.0        r1: -1.0    0.5
"""

import pytest
import torch

from flywheel.algorithms.distill import discounted_return, opd_advantages, route_by_tag

STUDENT = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.0, -7.0]])
TEACHER = torch.tensor([[-0.5, -2.5, -0.5], [-1.3, -0.5, 9.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def close(actual: torch.Tensor, expected: list) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected), rtol=0, atol=1e-6)


def test_per_token_advantage_is_teacher_minus_student_with_no_discount():
    adv, metrics = opd_advantages(STUDENT, {"t": TEACHER}, MASK, coefs={"t": 1.0})
    close(adv, [[0.5, -0.5, 0.0], [-1.0, 0.5, 0.0]])
    # k1 reverse KL = ℓ_S − ℓ_T, token mean over the 5 valid tokens: −(0.5−0.5+0−1+0.5)/5
    assert metrics["distill/reverse_kl"] == pytest.approx(0.1)
    assert metrics["distill/reverse_kl/t"] == pytest.approx(0.1)
    assert metrics["distill/rows/t"] == 1.0


def test_discounted_return():
    adv, _ = opd_advantages(STUDENT, {"t": TEACHER}, MASK, coefs={"t": 1.0}, gamma=0.5)
    # r0: t2 0; t1 −0.5 + ½·0; t0 0.5 + ½·(−0.5).  r1: t1 0.5; t0 −1 + ½·0.5
    close(adv, [[0.25, -0.5, 0.0], [-0.75, 0.5, 0.0]])


def test_discount_skips_tokens_off_the_mask():
    """An agentic row: a model token, an observation token (mask 0), a model token."""
    rewards = torch.tensor([[1.0, 100.0, 2.0]])
    out = discounted_return(rewards, torch.tensor([[1, 0, 1]]), 0.5)
    assert out.tolist() == [[1.0 + 0.5 * 2.0, 0.0, 2.0]]
    assert discounted_return(rewards, torch.tensor([[1, 0, 1]]), 1.0).tolist() == [[3.0, 0.0, 2.0]]
    with pytest.raises(ValueError, match="gamma"):
        discounted_return(rewards, torch.ones(1, 3), 1.5)


def test_mixed_mode_adds_the_weighted_term_to_the_rl_advantage():
    """ROLL's mixed mode: A = A^RL − opd_kl_coef · (ℓ_S − ℓ_T)."""
    rl = torch.tensor([[1.0], [-1.0]]).expand(2, 3)
    adv, _ = opd_advantages(STUDENT, {"t": TEACHER}, MASK, coefs={"t": 0.5},
                            rl_advantages=rl)
    close(adv, [[1.25, 0.75, 1.0], [-1.5, -0.75, 0.0]])


def test_teachers_routed_by_tag_with_their_own_coefficients():
    other = torch.tensor([[5.0, 5.0, 5.0], [-0.3, -2.0, 0.0]])  # row 1: r = [0, −1]
    routes = route_by_tag(["math", "code"], {"math_teacher": ("math",),
                                             "code_teacher": ("code",)})
    assert routes["math_teacher"].tolist() == [True, False]
    adv, metrics = opd_advantages(STUDENT, {"math_teacher": TEACHER, "code_teacher": other},
                                  MASK, coefs={"math_teacher": 1.0, "code_teacher": 2.0},
                                  routes=routes)
    # row 0 from math_teacher (×1), row 1 from code_teacher (×2): 2·[0, −1]
    close(adv, [[0.5, -0.5, 0.0], [0.0, -2.0, 0.0]])
    assert metrics["distill/reverse_kl/math_teacher"] == pytest.approx(0.0)
    assert metrics["distill/reverse_kl/code_teacher"] == pytest.approx(0.5)
    assert metrics["distill/rows/code_teacher"] == 0.5
    assert metrics["distill/reverse_kl"] == pytest.approx(1.0 / 5)


def test_a_row_with_two_teachers_sums_their_terms_and_an_empty_tag_list_takes_all():
    routes = route_by_tag(["math", "code"], {"a": ("math",), "b": ()})
    assert routes["b"].tolist() == [True, True]
    adv, _ = opd_advantages(STUDENT, {"a": TEACHER, "b": TEACHER}, MASK,
                            coefs={"a": 1.0, "b": 1.0}, routes=routes)
    close(adv, [[1.0, -1.0, 0.0], [-1.0, 0.5, 0.0]])


def test_a_tag_no_teacher_takes_is_an_error():
    with pytest.raises(ValueError, match=r"no teacher takes tag\(s\) \['chat'\]"):
        route_by_tag(["math", "chat"], {"a": ("math",)})


def test_teachers_and_coefficients_must_name_the_same_teachers():
    with pytest.raises(ValueError, match="different teachers"):
        opd_advantages(STUDENT, {"t": TEACHER}, MASK, coefs={"u": 1.0})
