"""EpisodeBuffer: contiguity, eviction, sampling distributions, memmap and checkpoint round trips."""

import numpy as np
import pytest
import torch

from heron.errors import HeronError
from heron.rl.buffers import EpisodeBuffer

FIELDS = {
    "step": ((), np.int64),
    "env": ((), np.int64),
    "ep": ((), np.int64),
    "is_first": ((), np.bool_),
    "obs": ((3, 4, 4), np.uint8),
}


def drive(buf, plans, after=None, stored=None):
    """Env i runs episodes of lengths ``plans[i]`` (a per-env step counter, a global episode id),
    then is masked out (its row is garbage). Returns [(ep_id, env, first_step, length)] in store order."""
    n = len(plans)
    stored = [] if stored is None else stored
    queues, t, step, ep_id, next_id = [list(p) for p in plans], [0] * n, [0] * n, [0] * n, 0
    while any(queues):
        mask = np.array([bool(q) for q in queues])
        row = {
            "step": np.full(n, -7, np.int64),
            "env": np.full(n, -7, np.int64),
            "ep": np.full(n, -7, np.int64),
            "is_first": np.ones(n, bool),
            "obs": np.full((n, 3, 4, 4), 255, np.uint8),
        }
        ended = np.ones(n, bool)  # masked envs claim to end: must be ignored
        for i in np.flatnonzero(mask):
            if t[i] == 0:
                ep_id[i], next_id = next_id, next_id + 1
            row["step"][i], row["env"][i], row["ep"][i] = step[i], i, ep_id[i]
            row["is_first"][i], row["obs"][i] = t[i] == 0, step[i] % 251
            step[i], t[i] = step[i] + 1, t[i] + 1
            ended[i] = t[i] == queues[i][0]
            if ended[i]:
                stored.append((ep_id[i], i, step[i] - t[i], t[i]))
                queues[i].pop(0)
                t[i] = 0
        buf.add(row, ended, mask)
        if after is not None:
            after(buf)
    return stored


def check_windows(batch, L):
    step, env, first = batch["step"], batch["env"], batch["is_first"]
    assert step.shape[1] == L and batch["obs"].shape[1:] == (L, 3, 4, 4)
    assert (np.diff(step, axis=1) == 1).all(), "non-consecutive steps in a window"
    assert (env == env[:, :1]).all() and (env >= 0).all(), "window spans envs / masked garbage"
    assert (batch["ep"] == batch["ep"][:, :1]).all()
    assert not first[:, 1:].any(), "window crosses an episode start"
    assert batch["obs"].dtype == np.uint8
    assert (batch["obs"] == (step % 251).astype(np.uint8)[:, :, None, None, None]).all()


def check_storage(buf, stored):
    """Stored index is consistent: no overlaps, in range, every episode whole and untorn."""
    spans = sorted(buf.episodes)
    for (s0, m0), (s1, _) in zip(spans, spans[1:]):
        assert s0 + m0 <= s1, f"overlapping episodes {buf.episodes}"
    assert all(s >= 0 and s + m <= buf.capacity for s, m in spans)
    assert len(buf) == sum(m for _, m in spans) <= buf.capacity
    info = {e: (first, n) for e, _, first, n in stored}
    for s, m in buf.episodes:
        ep = buf.data["ep"][s : s + m]
        assert (ep == ep[0]).all(), "torn episode"
        first, n = info[int(ep[0])]
        assert m == n and (buf.data["step"][s : s + m] == first + np.arange(n)).all()
        assert buf.data["is_first"][s] and not buf.data["is_first"][s + 1 : s + m].any()


def test_sequences_are_contiguous_and_stay_inside_episodes():
    L = 8
    buf = EpisodeBuffer(1000, 2, FIELDS, L, seed=1)
    plans = [[3, 12, 7, 20, 2], [15, 4, 9, 30, 8]]
    stored = drive(buf, plans)
    assert len(buf.episodes) == 10 and len(buf) == sum(map(sum, plans))
    assert buf.short_episodes == 4  # 3, 7, 2, 4
    assert all(not any(st.values()) for st in buf.staging)
    assert buf.data["obs"].dtype == np.uint8
    check_storage(buf, stored)
    seen = set()
    for _ in range(50):
        batch = buf.sample(64)
        check_windows(batch, L)
        seen |= set(batch["ep"][:, 0].tolist())
    assert seen == {e for e, _, _, n in stored if n >= L}


def test_wraparound_evicts_whole_oldest_episodes():
    buf = EpisodeBuffer(30, 1, FIELDS, 4, seed=0)
    drive(buf, [[10, 8, 9, 7, 6]])
    # 10@[0,10) 8@[10,18) 9@[18,27); 7 does not fit -> [0,7) evicts ep0; 6@[7,13) evicts ep1
    assert buf.episodes == [(18, 9), (0, 7), (7, 6)] and buf.pos == 13 and len(buf) == 22
    assert sorted(set(buf.sample(500)["ep"][:, 0].tolist())) == [2, 3, 4]


def test_wraparound_invariants_with_two_envs():
    cap, L = 64, 5
    buf = EpisodeBuffer(cap, 2, FIELDS, L, seed=3)
    plans = [[12, 9, 15, 6, 11, 8, 3, 17, 10], [10, 14, 7, 13, 5, 20, 9, 2, 12]]
    stored, positions = [], []
    drive(buf, plans, after=lambda b: (check_storage(b, stored), positions.append(b.pos)), stored=stored)
    assert sum(map(sum, plans)) > 2 * cap and (np.diff(positions) < 0).sum() >= 2  # wrapped at least twice
    survivors = [int(buf.data["ep"][s]) for s, _ in buf.episodes]
    order = [e for e, *_ in stored]
    assert len(survivors) < len(order) and set(order[: len(order) // 2]).isdisjoint(survivors)  # old ones gone
    assert survivors[-1] == order[-1] and buf.episodes[-1][0] + buf.episodes[-1][1] == buf.pos
    assert [order.index(e) for e in survivors] == sorted(order.index(e) for e in survivors)  # oldest first
    # (not strict FIFO: here the 3-step episode 12 parked at the tail outlives the newer episode 10,
    # see test_old_tail_episode_is_eventually_evicted)
    for _ in range(20):
        batch = buf.sample(64)
        check_windows(batch, L)
        assert set(batch["ep"][:, 0].tolist()) <= set(survivors)


def test_episodes_sampled_uniformly_whatever_their_length():
    """danijar/dreamerv2 and sheeprl draw the episode uniformly, then a window inside it."""
    buf = EpisodeBuffer(100, 1, FIELDS, 5, seed=7)
    drive(buf, [[10, 40]])
    ep = buf.sample(20_000)["ep"][:, 0]
    assert abs((ep == 0).mean() - 0.5) < 0.015 and abs((ep == 1).mean() - 0.5) < 0.015


def test_sequential_windows_sampled_uniformly_over_all_windows():
    """cross_episodes: episodes 10 and 40 long, adjacent, form one run of 50 steps with 46 windows of 5."""
    buf = EpisodeBuffer(100, 1, FIELDS, 5, seed=7, cross_episodes=True)
    drive(buf, [[10, 40]])
    start = buf.sample(46_000)["step"][:, 0]  # the env's step counter runs on across its episodes
    np.testing.assert_allclose(np.bincount(start, minlength=46) / 46_000, np.full(46, 1 / 46), atol=0.006)


@pytest.mark.parametrize("prioritize", [False, True])
def test_start_offset_distribution(prioritize):
    n, L, draws = 12, 5, 40_000
    buf = EpisodeBuffer(50, 1, FIELDS, L, prioritize_ends=prioritize, seed=11)
    drive(buf, [[n]])
    offset = buf.sample(draws)["step"][:, 0]
    freq = np.bincount(offset, minlength=n) / draws
    if prioritize:  # danijar's replay: min(U[0, n + 1), n - L): each early start 1/(n+1), the last window L+1 of them
        expected = np.r_[np.full(n - L, 1 / (n + 1)), (L + 1) / (n + 1), np.zeros(L - 1)]
    else:
        expected = np.r_[np.full(n - L + 1, 1 / (n - L + 1)), np.zeros(L - 1)]
    np.testing.assert_allclose(freq, expected, atol=0.01)
    assert offset.max() == n - L


def test_prioritize_ends_samples_episode_ends_more():
    def last_step_rate(prio):
        buf = EpisodeBuffer(200, 1, FIELDS, 4, prioritize_ends=prio, seed=5)
        drive(buf, [[30, 50]])
        b = buf.sample(10_000)
        ends = np.where(b["ep"][:, -1] == 0, 29, 79)
        return (b["step"][:, -1] == ends).mean()

    plain, prio = last_step_rate(False), last_step_rate(True)
    assert prio > 2.5 * plain


def test_memmap_round_trip_and_same_samples(tmp_path):
    plans = [[9, 14, 6], [11, 20]]
    mem = EpisodeBuffer(80, 2, FIELDS, 6, memmap_dir=str(tmp_path / "buf"), seed=4)
    ram = EpisodeBuffer(80, 2, FIELDS, 6, seed=4)
    drive(mem, plans), drive(ram, plans)
    assert sorted(p.name for p in (tmp_path / "buf").iterdir()) == sorted(f"{k}.npy" for k in FIELDS)
    assert isinstance(mem.data["obs"], np.memmap)
    used = len(ram)
    for k, (shape, dt) in FIELDS.items():
        disk = np.load(tmp_path / "buf" / f"{k}.npy", mmap_mode="r")
        assert disk.shape == (80, *shape) and disk.dtype == dt
        np.testing.assert_array_equal(disk[:used], ram.data[k][:used])
    assert mem.episodes == ram.episodes
    for _ in range(3):
        a, b = mem.sample(32), ram.sample(32)
        for k in FIELDS:
            np.testing.assert_array_equal(np.asarray(a[k]), b[k])


def test_state_dict_round_trip_restores_rng(tmp_path):
    a = EpisodeBuffer(60, 2, FIELDS, 5, seed=1)
    drive(a, [[9, 14, 6, 20], [11, 3, 25]])  # wraps
    a.sample(8)  # advance the RNG
    torch.save(a.state_dict(), tmp_path / "buf.pt")
    b = EpisodeBuffer(60, 2, FIELDS, 5, seed=999, memmap_dir=str(tmp_path / "mm"))
    b.load_state_dict(torch.load(tmp_path / "buf.pt", mmap=True, weights_only=True))
    assert b.episodes == a.episodes and b.pos == a.pos and b.short_episodes == a.short_episodes == 1
    for _ in range(4):
        x, y = a.sample(16), b.sample(16)
        for k in FIELDS:
            np.testing.assert_array_equal(x[k], np.asarray(y[k]))
            assert np.asarray(y[k]).dtype == x[k].dtype


def test_state_dict_stores_staged_episode_as_ended(tmp_path):
    a = EpisodeBuffer(100, 2, FIELDS, 4, seed=2)
    drive(a, [[10, 6], [12]])
    row = lambda t: {
        "step": np.array([100 + t, 200 + t]),
        "env": np.array([0, 1]),
        "ep": np.array([50, 51]),
        "is_first": np.array([t == 0, t == 0]),
        "obs": np.full((2, 3, 4, 4), t, np.uint8),
    }
    for t in range(7):  # env0 stages 7 steps, env1 only 2 (short)
        a.add(row(t), np.zeros(2, bool), mask=np.array([True, t < 2]))
    torch.save(a.state_dict(), tmp_path / "s.pt")
    b = EpisodeBuffer(100, 2, FIELDS, 4, seed=3)
    b.load_state_dict(torch.load(tmp_path / "s.pt", mmap=True, weights_only=True))
    assert len(b.episodes) == len(a.episodes) + 2 and b.episodes[-2:] == [(28, 7), (35, 2)]
    assert b.short_episodes == a.short_episodes + 1 and len(b) == len(a) + 9
    assert all(not any(st.values()) for st in b.staging)
    np.testing.assert_array_equal(b.data["step"][28:35], 100 + np.arange(7))
    batch = b.sample(2000)
    assert 50 in set(batch["ep"][:, 0].tolist()) and 51 not in set(batch["ep"].ravel().tolist())
    assert (np.diff(batch["step"], axis=1) == 1).all()


def test_errors():
    with pytest.raises(HeronError, match="smaller than the sequence length"):
        EpisodeBuffer(3, 1, FIELDS, 4)
    buf = EpisodeBuffer(50, 2, FIELDS, 10)
    with pytest.raises(HeronError, match="no stored episode is as long as the sequence length 10"):
        buf.sample(4)
    drive(buf, [[4, 9], [3]])
    assert len(buf) == 16 and not buf.sampleable()
    with pytest.raises(HeronError, match="sequence length 10"):
        buf.sample(4)
    drive(buf, [[10], []])
    assert buf.sampleable() and buf.sample(2)["step"].shape == (2, 10)


def test_add_mask_only_appends_to_masked_envs():
    buf = EpisodeBuffer(50, 2, FIELDS, 2)
    stored = drive(buf, [[2, 3, 4], [5]])  # env1 masked (and "ended") for its last 4 steps
    assert len(buf) == 14 and len(buf.episodes) == 4
    assert sorted(int(buf.data["env"][s]) for s, _ in buf.episodes) == [0, 0, 0, 1]
    check_storage(buf, stored)
    row = {k: np.zeros((2, *s), dt) for k, (s, dt) in FIELDS.items()}
    buf.add(row, np.array([False, False]), mask=np.array([False, True]))
    assert [len(st["step"]) for st in buf.staging] == [0, 1]
    buf.add(row, np.array([True, True]), mask=np.array([True, False]))
    assert len(buf.episodes) == 5 and buf.episodes[-1] == (14, 1) and [len(st["step"]) for st in buf.staging] == [0, 1]


def test_staged_episode_longer_than_capacity_loads():
    a = EpisodeBuffer(10, 1, {"x": ((), np.int64)}, 5)
    for t in range(15):
        a.add({"x": np.array([t])}, np.array([False]))
    b = EpisodeBuffer(10, 1, {"x": ((), np.int64)}, 5)
    b.load_state_dict(a.state_dict())  # expected: keeps the last 10 steps, like add() does on end
    assert b.episodes == [(0, 10)] and (b.data["x"] == np.arange(5, 15)).all()


def test_old_tail_episode_is_eventually_evicted():
    buf = EpisodeBuffer(100, 1, {"x": ((), np.int64)}, 5)
    for i, n in enumerate([90, 10] + [30] * 20):
        buf.store_episode({"x": np.full(n, i)})
    assert all(buf.data["x"][s] >= 18 for s, _ in buf.episodes)  # only the newest survive
