import numpy as np
import torch

from heron.rl.buffers import ReplayBuffer


def _row(buf, t, n_envs=2, obs_shape=(3,), dtype=np.float32):
    obs = np.full((n_envs, *obs_shape), t, dtype)
    return dict(
        obs=obs,
        next_obs=obs + 1,
        actions=np.full((n_envs, 1), t, np.float32),
        rewards=np.full(n_envs, t, np.float32),
        terminated=np.zeros(n_envs, bool),
        truncated=np.zeros(n_envs, bool),
    )


def test_wraparound_keeps_the_newest_rows():
    buf = ReplayBuffer(capacity=10, num_envs=2, obs_shape=(3,), obs_dtype=np.float32, action_shape=(1,))
    assert buf.rows == 5
    for t in range(7):
        buf.add(**_row(buf, t))
    assert buf.full and buf.pos == 2 and len(buf) == 10
    stored = sorted(set(buf.data["rewards"][:, 0].tolist()))
    assert stored == [2, 3, 4, 5, 6]  # 0 and 1 overwritten
    batch = buf.sample(500)
    assert set(batch["rewards"].tolist()) <= {2.0, 3.0, 4.0, 5.0, 6.0}
    assert torch.equal(batch["next_obs"], batch["obs"] + 1)  # fields of one transition stay together


def test_dtypes_are_kept_and_uint8_stays_uint8():
    buf = ReplayBuffer(capacity=8, num_envs=1, obs_shape=(4, 4), obs_dtype=np.uint8, action_shape=(2,))
    buf.add(
        obs=np.full((1, 4, 4), 255, np.uint8),
        next_obs=np.zeros((1, 4, 4), np.uint8),
        actions=np.zeros((1, 2), np.float32),
        rewards=np.ones(1, np.float32),
        terminated=np.array([True]),
        truncated=np.array([False]),
    )
    batch = buf.sample(4)
    assert batch["obs"].dtype == torch.uint8 and batch["obs"].shape == (4, 4, 4)
    assert int(batch["obs"].max()) == 255
    assert batch["terminated"].dtype == torch.bool and bool(batch["terminated"].all())
    assert batch["actions"].shape == (4, 2)


def test_footprint_is_the_arrays_only():
    """1M Hopper transitions (11-dim obs, 3-dim actions): well under 200 MB."""
    buf = ReplayBuffer(capacity=1_000_000, num_envs=1, obs_shape=(11,), obs_dtype=np.float32, action_shape=(3,))
    expected = 1_000_000 * (2 * 11 * 4 + 3 * 4 + 4 + 1 + 1)
    assert buf.nbytes() == expected
    assert buf.nbytes() < 200 * 2**20


def test_sequences_are_contiguous_per_env_and_never_cross_the_write_position():
    buf = ReplayBuffer(capacity=12, num_envs=2, obs_shape=(3,), obs_dtype=np.float32, action_shape=(1,))
    for t in range(9):  # 6 rows; rows hold t = 6, 7, 8, 3, 4, 5 -> oldest is 3
        row = _row(buf, t)
        row["obs"][1] += 100  # env 1 distinguishable
        buf.add(**row)
    seqs = buf.sample_sequences(200, 4)
    r = seqs["rewards"]  # [B, L]
    assert r.shape == (200, 4)
    assert torch.all(r[:, 1:] - r[:, :-1] == 1)  # consecutive time steps, oldest 3 .. newest 8
    assert r.min() >= 3 and r.max() <= 8
    env = seqs["obs"][:, :, 0] >= 100  # each sequence stays within one env
    assert torch.all(env == env[:, :1])


def test_state_dict_round_trip_continues_identically():
    a = ReplayBuffer(capacity=20, num_envs=2, obs_shape=(3,), obs_dtype=np.float32, action_shape=(1,), seed=5)
    for t in range(4):
        a.add(**_row(a, t))
    a.sample(3)
    b = ReplayBuffer(capacity=20, num_envs=2, obs_shape=(3,), obs_dtype=np.float32, action_shape=(1,), seed=99)
    b.load_state_dict(a.state_dict())
    for t in range(4, 15):
        a.add(**_row(a, t))
        b.add(**_row(b, t))
    sa, sb = a.sample(32), b.sample(32)
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_mark_truncated_flags_the_newest_step_of_chosen_envs():
    buf = ReplayBuffer(capacity=8, num_envs=2, obs_shape=(3,), obs_dtype=np.float32, action_shape=(1,))
    buf.mark_truncated(np.array([True, True]))  # empty: nothing to flag
    for t in range(5):  # wraps: newest row is row 0
        buf.add(**_row(buf, t))
    buf.mark_truncated(np.array([False, True]))
    assert buf.data["truncated"][0].tolist() == [False, True]
    assert not buf.data["truncated"][1:].any()


def test_rollout_ring_checkpointed_mid_rollout_keeps_the_whole_rollouts_oldest_first():
    """An env crash mid-rollout checkpoints the ring without the half-overwritten slot, oldest first,
    so that after resume the next rollout is written after the newest and evicts the oldest."""
    import torch

    from heron.rl.buffers import RolloutBuffer

    buf = RolloutBuffer(3, 2, 1, {"x": ((), torch.float32)}, {})
    for k in (1.0, 2.0, 3.0, 4.0):  # rollout 4 overwrote rollout 1 in slot 0
        buf.writing()["x"].fill_(k)
        buf.commit()
    assert buf.state_dict()["count"] == 3
    buf.writing()["x"][0] = 5.0  # rollout 5 half-written into slot 1, over rollout 2
    state = buf.state_dict()
    assert state["count"] == 2 and state["slot"] == 2
    assert state["data"]["x"][:, 0, 0].tolist() == [3.0, 4.0]  # oldest first; rollout 2 is gone
    resumed = RolloutBuffer(3, 2, 1, {"x": ((), torch.float32)}, {})
    resumed.load_state_dict(state)
    for k in (5.0, 6.0):
        resumed.writing()["x"].fill_(k)
        resumed.commit()
    assert sorted(resumed.stored()["x"][:, 0, 0].tolist()) == [4.0, 5.0, 6.0]  # rollout 3, the oldest, evicted


def test_checkpointed_replay_holds_the_filled_rows_only():
    """torch.save writes a view's whole storage: the state must copy the filled part out."""
    import io

    buf = ReplayBuffer(capacity=100_000, num_envs=1, obs_shape=(11,), obs_dtype=np.float32, action_shape=(3,))
    for t in range(10):
        buf.add(**_row(buf, t, n_envs=1, obs_shape=(11,)))
    out = io.BytesIO()
    torch.save(buf.state_dict(), out)
    assert len(out.getvalue()) < 20_000  # 10 rows, not the 100,000 preallocated (about 10 MB)


def test_cpu_sampling_gathers_the_rows_index_select_gathers_and_only_the_fields_asked():
    """On the CPU rows are written and gathered through numpy views of the tensors: the same rows
    from the same generator state as the tensor path, with every dtype kept."""
    buf = ReplayBuffer(capacity=40, num_envs=2, obs_shape=(3,), obs_dtype=np.float32, action_shape=(1,))
    rng = np.random.default_rng(0)
    for _ in range(13):
        buf.add(
            obs=rng.normal(size=(2, 3)),
            next_obs=rng.normal(size=(2, 3)).astype(np.float32),
            actions=rng.normal(size=(2, 1)),
            rewards=rng.normal(size=2),
            terminated=rng.random(2) < 0.3,
            truncated=torch.as_tensor(rng.random(2) < 0.3),
        )  # a tensor value takes the tensor path
    state = buf.generator.get_state()
    got = buf.sample(64, ("obs", "rewards", "terminated", "truncated"))
    assert set(got) == {"obs", "rewards", "terminated", "truncated"}
    buf.generator.set_state(state)
    buf._np = None  # the tensor path
    want = buf.sample(64)
    for k, v in got.items():
        assert v.dtype == want[k].dtype and torch.equal(v, want[k]), k
    assert bool(got["terminated"].any()) and bool(got["truncated"].any())


def test_sequence_windows_are_the_same_rows_through_numpy_and_index_select():
    """Sequence windows go through the same gather as single transitions: on the CPU numpy's take,
    giving what index_select gives, shaped [B, L, ...], every field and dtype kept."""
    buf = ReplayBuffer(
        capacity=30, num_envs=3, obs_shape=(2,), obs_dtype=np.uint8, action_shape=(1,), extra={"actor_state": (4,)}
    )
    rng = np.random.default_rng(1)
    for t in range(14):  # wraps past the 10 rows
        buf.add(**_row(buf, t, 3, (2,), np.uint8), actor_state=rng.normal(size=(3, 4)).astype(np.float32))
    state = buf.generator.get_state()
    got = buf.sample_sequences(6, 4)
    buf.generator.set_state(state)
    rows = buf.sequence_indices(6, 4)
    assert rows.shape == (24,)
    buf._np = None  # the tensor path
    want = buf.gather(rows, None, (6, 4))
    assert set(got) == set(want) == set(buf.data)
    for k, v in got.items():
        assert v.shape[:2] == (6, 4) and v.dtype == want[k].dtype and torch.equal(v, want[k]), k
    steps = got["actions"][..., 0]  # [B, L]: consecutive steps of one env, never across the write position (row 4)
    assert torch.equal(steps[:, 1:] - steps[:, :-1], torch.ones(6, 3)) and bool((steps >= 4).all())


def test_n_step_windows_stop_at_a_truncation_a_termination_and_the_newest_step():
    rb = ReplayBuffer(20, 2, (1,), np.float32, (1,))  # 10 steps x 2 envs
    ended = {(1, 0): "truncated", (4, 0): "terminated"}
    for t in range(6):
        rb.add(
            obs=np.array([[t], [t]], np.float32),
            next_obs=np.array([[100 * t], [100 * t + 1]], np.float32),
            actions=np.zeros((2, 1), np.float32),
            rewards=np.array([t + 1, 10 * (t + 1)], np.float32),
            terminated=np.array([ended.get((t, e)) == "terminated" for e in range(2)]),
            truncated=np.array([ended.get((t, e)) == "truncated" for e in range(2)]),
        )
    starts = torch.tensor([0 * 2 + 0, 2 * 2 + 0, 4 * 2 + 0, 4 * 2 + 1, 5 * 2 + 1, 0 * 2 + 1])  # t * N + env
    batch = rb.gather_nstep(*rb.nstep_rows(starts, 3), gamma=0.5)
    # env 0 from t=0: r 1, then 2 at the truncated step: 1 + 0.5 * 2; bootstraps from t=1's final obs
    # env 0 from t=2: 3 + 0.5 * 4 + 0.25 * 5, terminated at t=4; from t=4: 5 alone, terminated
    # env 1 from t=4: 50 + 0.5 * 60, and the window ends at the newest step (t=5); from t=5: 60
    # env 1 from t=0: the whole window, 10 + 0.5 * 20 + 0.25 * 30
    torch.testing.assert_close(batch["rewards"], torch.tensor([2.0, 6.25, 5.0, 80.0, 60.0, 27.5]))
    torch.testing.assert_close(batch["discount"], torch.tensor([0.25, 0.125, 0.5, 0.25, 0.5, 0.125]))
    assert batch["terminated"].tolist() == [False, True, True, False, False, False]
    assert batch["next_obs"][:, 0].tolist() == [100, 400, 400, 501, 501, 201]
    assert batch["obs"][:, 0].tolist() == [0, 2, 4, 4, 5, 0]  # the window's first step


def test_n_step_windows_follow_the_ring_past_its_end():
    rb = ReplayBuffer(4, 1, (1,), np.float32, (1,))  # 4 steps: after 6 writes, rows hold steps 4, 5, 2, 3
    for t in range(6):
        rb.add(
            obs=np.array([[t]], np.float32),
            next_obs=np.array([[t + 1]], np.float32),
            actions=np.zeros((1, 1), np.float32),
            rewards=np.array([t], np.float32),
            terminated=np.array([False]),
            truncated=np.array([False]),
        )
    batch = rb.gather_nstep(*rb.nstep_rows(torch.tensor([3, 1, 2]), 3), gamma=0.5)
    torch.testing.assert_close(batch["rewards"], torch.tensor([3 + 0.5 * 4 + 0.25 * 5, 5.0, 2 + 0.5 * 3 + 0.25 * 4]))
    assert batch["next_obs"][:, 0].tolist() == [6, 6, 5]  # row 1 (step 5) is the newest: its window is 1 step
