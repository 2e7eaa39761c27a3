"""The pure math of the critic and PPO (forgeline.train.rl) against hand-computed values."""
from __future__ import annotations

import math

import pytest

import torch  # a dependency of forgeline: a missing one is a failure, not a skip

from forgeline.agent.rewards import token_rewards  # noqa: E402
from forgeline.train import rl  # noqa: E402

from embedded import PARAMS  # noqa: E402

torch.set_num_threads(1)
T = lambda *xs: torch.tensor(xs, dtype=torch.float64)  # noqa: E731


def test_gae_three_steps_by_hand():
    # gamma 0.9, lam 0.8 (gamma*lam = 0.72), V = 0 after the last step
    # delta2 = 1 - 0.7 = 0.3                 A2 = 0.3
    # delta1 = 0 + 0.9*0.7 - 0.6 = 0.03      A1 = 0.03 + 0.72*0.3   = 0.246
    # delta0 = 0 + 0.9*0.6 - 0.5 = 0.04      A0 = 0.04 + 0.72*0.246 = 0.21712
    adv, ret = rl.gae(T(0, 0, 1), T(0.5, 0.6, 0.7), T(1, 1, 1), 0.9, 0.8)
    assert adv.tolist() == pytest.approx([0.21712, 0.246, 0.3])
    assert ret.tolist() == pytest.approx([0.71712, 0.846, 1.0])
    # the same three action tokens spread over a longer sequence (tool tokens between turns):
    # masked positions are skipped, whatever value the critic puts there
    adv2, ret2 = rl.gae(T(0, 0, 0, 0, 1, 0), T(9, 0.5, 9, 0.6, 0.7, 9), T(0, 1, 0, 1, 1, 0), 0.9, 0.8)
    assert adv2.tolist() == pytest.approx([0, 0.21712, 0, 0.246, 0.3, 0])
    assert ret2.tolist() == pytest.approx([0, 0.71712, 0, 0.846, 1.0, 0])
    # batched rows are independent
    adv3, _ = rl.gae(torch.stack([T(0, 0, 1), T(1, 0, 0)]), torch.stack([T(0.5, 0.6, 0.7), T(0, 0, 0)]),
                     torch.ones(2, 3, dtype=torch.float64), 0.9, 0.8)
    assert adv3[0].tolist() == pytest.approx([0.21712, 0.246, 0.3]) and adv3[1].tolist() == pytest.approx([1, 0, 0])
    with pytest.raises(ValueError, match="non-action"):
        rl.gae(T(1, 0), T(0, 0), T(0, 1), 1.0, 1.0)


def test_lambda_returns_equal_the_recursive_definition():
    # G_t = r_t + gamma * ((1 - lam) V_{t+1} + lam G_{t+1}), G after the end = 0
    # G2 = 1; G1 = 0.9 * (0.2*0.7 + 0.8*1) = 0.846; G0 = 0.9 * (0.2*0.6 + 0.8*0.846) = 0.71712
    g = rl.lambda_returns(T(0, 0, 1), T(1, 1, 1), 0.9, 0.8, values=T(0.5, 0.6, 0.7))
    assert g.tolist() == pytest.approx([0.71712, 0.846, 1.0])
    # without values (offline critic targets): discount gamma*lam = 0.72
    assert rl.lambda_returns(T(0.1, 0, 1), T(1, 1, 1), 0.9, 0.8).tolist() == pytest.approx([0.1 + 0.72 ** 2, 0.72, 1])
    # gamma = lam = 1: the reward-to-go
    assert rl.lambda_returns(T(0.1, 0, 1), T(1, 1, 1), 1.0, 1.0).tolist() == pytest.approx([1.1, 1.0, 1.0])


def test_returns_from_an_episode_record_with_process_and_terminal_rewards():
    good = {"well_formed_call": True, "command_ran": True, "no_error": True, "tests_improved": None}
    bad = {"well_formed_call": False, "command_ran": False, "no_error": None, "tests_improved": None}
    # tokens: 2 prompt, turn 0 generates [2, 4), 1 tool token, turn 1 generates [5, 7), 1 tail token
    ep = {"instance_id": "x", "outcome": "resolved", "stats": {"steps": 2},
          "tokens": [0] * 8, "action_mask": [0, 0, 1, 1, 0, 1, 1, 0],
          "turns": [{"labels": bad, "span": [2, 4]}, {"labels": good, "span": [5, 7]}]}
    r = torch.tensor(token_rewards(ep, PARAMS.agent.reward), dtype=torch.float64)
    # bad: -0.02 - 0.01 = -0.03 on token 3; good: 0.04 + (1.0 - 0.02 steps) = 1.02 on token 6
    assert r.tolist() == pytest.approx([0, 0, 0, -0.03, 0, 0, 1.02, 0])
    g = rl.lambda_returns(r, torch.tensor(ep["action_mask"], dtype=torch.float64), 1.0, 1.0)
    assert g.tolist() == pytest.approx([0, 0, 0.99, 0.99, 0, 1.02, 1.02, 0])
    assert rl.action_positions(ep["action_mask"]) == [2, 3, 5, 6]


def test_explained_variance_and_mse():
    # Var(target) = 14/9, Var(target - pred) = Var([0, 0, 1]) = 2/9 -> EV = 1 - 1/7
    assert rl.explained_variance(T(1, 2, 3), T(1, 2, 4)) == pytest.approx(6 / 7)
    assert rl.explained_variance(T(5, 5, 5), T(1, 2, 4)) == pytest.approx(0.0)  # the mean-only baseline
    assert rl.explained_variance(T(2, 3, 5), T(1, 2, 4)) == pytest.approx(1.0)  # an offset is not penalised
    assert rl.explained_variance(T(4, 2, 1), T(1, 2, 4)) < 0
    assert math.isnan(rl.explained_variance(T(1, 2), T(3, 3)))
    assert rl.explained_variance(T(1, 2, 3, 100), T(1, 2, 4, -7), T(1, 1, 1, 0)) == pytest.approx(6 / 7)
    assert rl.mse(T(1, 2, 3), T(1, 2, 5)) == pytest.approx(4 / 3)


def test_whiten_and_masked_means():
    x, m = T(1, 2, 3, 50), T(1, 1, 1, 0)
    w = rl.whiten(x, m)
    assert w.tolist() == pytest.approx([-math.sqrt(1.5), 0, math.sqrt(1.5), 0], abs=1e-6)
    # with the moments of a larger (global) batch
    big = T(1, 2, 3, 4, 5)
    w2 = rl.whiten(x, m, moments=rl.masked_moments(big, torch.ones(5, dtype=torch.float64)))
    assert w2[:3].tolist() == pytest.approx([(v - 3) / math.sqrt(2) for v in (1, 2, 3)], abs=1e-6)
    assert rl.whiten(x, m, shift_mean=False)[:3].mean().item() == pytest.approx(2.0)
    assert rl.masked_mean(T(1, 2, 3), T(1, 0, 1)).item() == pytest.approx(2.0)
    # a global count: the parts of a minibatch add up to its mean
    a, b = T(1, 2), T(3, 4, 5)
    parts = rl.masked_mean(a, torch.ones(2), 5) + rl.masked_mean(b, torch.ones(3), 5)
    assert parts.item() == pytest.approx(3.0)


def test_clipped_policy_loss_by_hand():
    # ratios 1.5, 1.5, 0.5, 0.5 with advantages +1, -1, +1, -1 and eps 0.2:
    #   A=+1 r=1.5: max(-1.5, -1.2) = -1.2 (clipped)   A=-1 r=1.5: max(1.5, 1.2) = 1.5
    #   A=+1 r=0.5: max(-0.5, -0.8) = -0.5             A=-1 r=0.5: max(0.5, 0.8) = 0.8 (clipped)
    logp = torch.log(T(1.5, 1.5, 0.5, 0.5)).requires_grad_()
    old = torch.zeros(4, dtype=torch.float64)
    adv = T(1, -1, 1, -1)
    loss, clip_frac, approx_kl = rl.policy_loss(logp, old, adv, torch.ones(4, dtype=torch.float64), 0.2)
    assert loss.item() == pytest.approx((-1.2 + 1.5 - 0.5 + 0.8) / 4)
    assert clip_frac.item() == pytest.approx(0.5)
    assert approx_kl.item() == pytest.approx(-(2 * math.log(1.5) + 2 * math.log(0.5)) / 4)
    loss.backward()
    # the clipped tokens carry no gradient; d/dlogp(-A r) = -A r / 4 for the others
    assert logp.grad.tolist() == pytest.approx([0.0, 1.5 / 4, -0.5 / 4, 0.0])
    # ratio 1 everywhere: the loss is -mean(A) and nothing is clipped
    l1, c1, _ = rl.policy_loss(old, old, adv * 2 + 1, torch.ones(4, dtype=torch.float64), 0.2)
    assert l1.item() == pytest.approx(-1.0) and c1.item() == 0.0


def test_clipped_value_loss_by_hand():
    ones = torch.ones(1, dtype=torch.float64)
    # V=0.9, old=0.5, R=0: V_clip=0.7; errors 0.81 vs 0.49 -> 0.5 * 0.81
    loss, frac = rl.value_loss(T(0.9), T(0.5), T(0.0), ones, 0.2)
    assert loss.item() == pytest.approx(0.405) and frac.item() == 0.0
    # V=0.9, old=0.5, R=1: errors 0.01 vs (0.7-1)^2 = 0.09 -> the clipped one, 0.045
    loss, frac = rl.value_loss(T(0.9), T(0.5), T(1.0), ones, 0.2)
    assert loss.item() == pytest.approx(0.045) and frac.item() == 1.0
    # no clip: 0.5 * MSE
    assert rl.value_loss(T(0.9, 0.0), T(0, 0), T(1.0, 1.0), torch.ones(2), None)[0].item() == pytest.approx(0.5 * (0.01 + 1) / 2)


def test_kl_estimators():
    logp, ref = torch.log(T(0.5)), torch.log(T(0.25))  # log r = log(ref/p) = -log 2
    assert rl.kl_estimate(logp, ref, "k1").item() == pytest.approx(math.log(2))
    assert rl.kl_estimate(logp, ref, "k2").item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert rl.kl_estimate(logp, ref, "k3").item() == pytest.approx(0.5 - 1 + math.log(2))
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(1000, generator=g), torch.randn(1000, generator=g)
    assert bool((rl.kl_estimate(a, b, "k3") >= 0).all())
    assert rl.kl_estimate(a, a, "k3").abs().max().item() == 0.0
    # unbiased: sampling x ~ p, mean k3 and k1 approach KL(p || q) of two categoricals
    p, q = torch.tensor([0.7, 0.2, 0.1]), torch.tensor([0.3, 0.3, 0.4])
    x = torch.multinomial(p, 200000, replacement=True, generator=g)
    true_kl = float((p * (p / q).log()).sum())
    for kind in ("k1", "k3"):
        assert rl.kl_estimate(p.log()[x], q.log()[x], kind).mean().item() == pytest.approx(true_kl, rel=0.03)
    with pytest.raises(ValueError):
        rl.kl_estimate(a, b, "k9")


def test_entropy_and_logprobs_from_logits():
    assert rl.entropy_from_logits(torch.zeros(2, 4)).tolist() == pytest.approx([math.log(4)] * 2)
    assert rl.entropy_from_logits(torch.tensor([[100.0, 0, 0]])).item() == pytest.approx(0.0, abs=1e-6)
    p = torch.tensor([0.5, 0.25, 0.25])
    assert rl.entropy_from_logits(p.log()[None]).item() == pytest.approx(-(p * p.log()).sum().item())
    lp = rl.logprobs_from_logits(torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]])), torch.tensor([1, 2]))
    assert lp.tolist() == pytest.approx([math.log(0.25), math.log(0.8)])
