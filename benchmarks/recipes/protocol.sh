#!/usr/bin/env bash
# The results page's tables under the protocol (docs/guide/benchmarks.md, "Protocol"): reporting seeds from 100,
# both algorithms of a table in one invocation on one machine, the same evaluation grid for all, run records kept.
# Each line writes CSV/JSON/PNG and runs/ into $OUT/TABLE; the data folders of benchmarks/tables.yml are these
# folders, copied under docs/benchmarks/protocol/. Then `python -m benchmarks tables` writes the pages.
# A table may span sittings on the same machine kind and software: rerun its line with --first-seed N --seeds K
# --append (the runner refuses an --append or --merge from another machine or software).
# Step-based lines may share the machine (two at a time, one torch thread each); wall-clock lines run alone.
set -euo pipefail
OUT=${OUT:-results/protocol}
STEPS_1M=(--steps 1000000 --eval-freq 20000 --eval-episodes 10 --jobs 1 --torch-threads 1)

# PPO's Hopper baseline: rl-zoo3's Hopper-v4 entry on Hopper-v5 and on Hopper-v4 itself, and SB3's PPO defaults with
# VecNormalize (the settings of CleanRL's and the PPO paper's MuJoCo runs), one seed each first (step-based).
# PPO_DEFAULTS is that variant, for the later lines.
PPO_DEFAULTS='ppo[n_steps=2048,batch_size=64,gamma=0.99,learning_rate=lin_3e-4,ent_coef=0.0,clip_range=0.2,n_epochs=10,gae_lambda=0.95,max_grad_norm=0.5,vf_coef=0.5,policy_kwargs=dict()]'
python -m benchmarks run --algos ppo "ppo[n_steps=2048,batch_size=64,gamma=0.99,learning_rate=lin_3e-4,ent_coef=0.0,clip_range=0.2,n_epochs=10,gae_lambda=0.95,max_grad_norm=0.5,vf_coef=0.5,policy_kwargs=dict()]" \
    --env Hopper-v5 Hopper-v4 --first-seed 100 --seeds 1 --steps 1000000 --eval-freq 20000 --eval-episodes 10 --jobs 1 \
    --torch-threads 1 --out "$OUT/ppo_hopper_baseline"

# V-RACER against SB3 PPO at 1M steps (step-based).
python -m benchmarks run --algos ppo vracer --env HalfCheetah-v5 --first-seed 100 --seeds 3 "${STEPS_1M[@]}" \
    --out "$OUT/vracer_ppo_halfcheetah_1m"
python -m benchmarks run --algos "$PPO_DEFAULTS" vracer --env Hopper-v5 --first-seed 100 --seeds 3 "${STEPS_1M[@]}" \
    --out "$OUT/vracer_ppo_hopper_1m"
# Walker2d-v5 (issue 64), the entry unchanged since its 1M-step check on seeds 0-2: V-RACER and PPO (rl-zoo3's entry)
# in one invocation, step-based, seed by seed; it ran with --jobs 2 (2026-12-06, AMD EPYC x2: a V-RACER run about an
# hour of training there, PPO's half an hour), which only sets how many runs go at once, and was stopped as seed 102
# began (recorded as failed): seed 102 was appended in the next sitting on that machine kind (the second line, again
# with --jobs 2), then the ablation, ReF-ER's rules off, one seed per line (each run about an hour): seed 100 into a
# side folder beside seed 101 appended to the table (one writer per CSV), the side folder merged in, and seed 102
# appended in a later sitting.
python -m benchmarks run --algos vracer ppo --env Walker2d-v5 --first-seed 100 --seeds 3 --order interleaved \
    "${STEPS_1M[@]}" --out "$OUT/vracer_ppo_walker2d_1m"
python -m benchmarks run --algos vracer ppo --env Walker2d-v5 --first-seed 102 --seeds 1 --order interleaved \
    "${STEPS_1M[@]}" --append --out "$OUT/vracer_ppo_walker2d_1m"
python -m benchmarks run --algos "vracer[refer_rules=[]]" --env Walker2d-v5 --first-seed 100 --seeds 1 \
    "${STEPS_1M[@]}" --out "$OUT/vracer_ppo_walker2d_1m_ablation"
python -m benchmarks run --algos "vracer[refer_rules=[]]" --env Walker2d-v5 --first-seed 101 --seeds 1 \
    "${STEPS_1M[@]}" --append --baseline ppo --out "$OUT/vracer_ppo_walker2d_1m"
python -m benchmarks run --algos "vracer[refer_rules=[]]" --env Walker2d-v5 --baseline ppo \
    --out "$OUT/vracer_ppo_walker2d_1m" --merge "$OUT/vracer_ppo_walker2d_1m_ablation"
python -m benchmarks run --algos "vracer[refer_rules=[]]" --env Walker2d-v5 --first-seed 102 --seeds 1 \
    "${STEPS_1M[@]}" --append --baseline ppo --out "$OUT/vracer_ppo_walker2d_1m"
# Their ablation (issue 64): ReF-ER's rules off, all else equal, appended step-based on the same seeds (a step-based
# comparison does not depend on the day's machine speed); a V-RACER run took 2.1-2.4 h on one core here. The
# runner appends only on the machine kind of the table (AMD EPYC x2): on the Intel Xeon kind a run would outlast a
# 180-minute sitting (docs/results.md, V-RACER). Ran on the AMD kind on 2026-12-01, both lines side by side, as
# --first-seed 100 --seeds 1 and then --first-seed 101 --seeds 2 (about 32 minutes a run there).
python -m benchmarks run --algos "vracer[refer_rules=[]]" --env HalfCheetah-v5 --first-seed 100 --seeds 3 \
    "${STEPS_1M[@]}" --append --baseline ppo --out "$OUT/vracer_ppo_halfcheetah_1m"
python -m benchmarks run --algos "vracer[refer_rules=[]]" --env Hopper-v5 --first-seed 100 --seeds 3 \
    "${STEPS_1M[@]}" --append --baseline "$PPO_DEFAULTS" --out "$OUT/vracer_ppo_hopper_1m"

# PPO-AMBER's steps to PPO's 1M-step return (step-based). On HalfCheetah-v5 its PPO runs are those of the V-RACER
# table above (rl-zoo3's entry, the same seeds, grid, threads, machine kind and software): PPO-AMBER's runs, made
# side by side, are merged with them. On Walker2d-v5 both run here.
python -m benchmarks run --algos ppo_amber --env HalfCheetah-v5 --first-seed 100 --seeds 3 "${STEPS_1M[@]}" \
    --out "$OUT/ppo_amber_halfcheetah_1m"
python -m benchmarks run --algos ppo ppo_amber --env HalfCheetah-v5 --first-seed 100 --seeds 3 "${STEPS_1M[@]}" \
    --out "$OUT/ppo_amber_ppo_1m" --merge "$OUT/vracer_ppo_halfcheetah_1m" "$OUT/ppo_amber_halfcheetah_1m"
python -m benchmarks run --algos ppo ppo_amber --env Walker2d-v5 --first-seed 100 --seeds 3 "${STEPS_1M[@]}" \
    --out "$OUT/ppo_amber_ppo_1m"
# The HalfCheetah-v5 row's ablation (replay off, all else equal), appended on its seeds in a later sitting (issue 64).
python -m benchmarks run --algos "ppo_amber[replay_length=1]" --env HalfCheetah-v5 --first-seed 100 --seeds 3 \
    "${STEPS_1M[@]}" --append --baseline ppo --out "$OUT/ppo_amber_ppo_1m"
# The Walker2d-v5 row after its eps_b search (eps_b lin_0.25, clip 0.2), on fresh seeds, PPO and the ablation beside
# it: seed 200 ran (2026-11-28), lost, and led to the clip search (ppo_amber.yml: clip 0.1). That entry on seeds
# 300-304, run over sittings as --first-seed N --seeds K (--append after the first); seeds 300-302 and 303-304 ran
# with --jobs 2 (2026-11-28), which only sets how many runs go at once.
python -m benchmarks run --algos ppo ppo_amber "ppo_amber[replay_length=1]" --env Walker2d-v5 --first-seed 200 \
    --seeds 1 --order interleaved "${STEPS_1M[@]}" --out "$OUT/ppo_amber_ppo_walker2d_1m_200"
python -m benchmarks run --algos ppo ppo_amber "ppo_amber[replay_length=1]" --env Walker2d-v5 --first-seed 300 \
    --seeds 5 --order interleaved "${STEPS_1M[@]}" --out "$OUT/ppo_amber_ppo_walker2d_1m_300"
# The Hopper-v5 row: the entry chosen by its search over L (ppo_amber.yml: the baseline's PPO plus L = 8 and eps_b
# lin_0.25) beside that PPO and the ablation (replay off), seeds 100-102 in one invocation; it ran with --jobs 2
# (2026-11-30), which only sets how many runs go at once.
python -m benchmarks run --algos "$PPO_DEFAULTS" ppo_amber "ppo_amber[replay_length=1]" --env Hopper-v5 \
    --first-seed 100 --seeds 3 --order interleaved "${STEPS_1M[@]}" \
    --plot-diagnostics active_batches replay_ratio_min std --out "$OUT/ppo_amber_ppo_hopper_1m"

# PPO-AMBER's steps to PPO's return on Pendulum-v1, at the yml budget of both (100k steps, step-based), its ablation
# (replay off, all else equal) beside them in the same invocation. Seeds 100-102 ran with the entry before its search
# (a constant learning rate 1e-3 and clip range 0.2, at 9de4a90); ppo_amber.yml now anneals both, so this line as
# written runs the new entry.
python -m benchmarks run --algos ppo ppo_amber "ppo_amber[replay_length=1]" --env Pendulum-v1 --first-seed 100 --seeds 3 \
    --steps 100000 --eval-freq 5000 --eval-episodes 10 --jobs 2 --torch-threads 1 --order interleaved \
    --plot-diagnostics active_batches replay_ratio_min clip_fraction --out "$OUT/ppo_amber_ppo_pendulum"
# The entry after its search (ppo_amber.yml: lr and clip annealed) on fresh seeds, PPO and the ablation beside it.
python -m benchmarks run --algos ppo ppo_amber "ppo_amber[replay_length=1]" --env Pendulum-v1 --first-seed 200 --seeds 5 \
    --steps 100000 --eval-freq 5000 --eval-episodes 10 --jobs 2 --torch-threads 1 --order interleaved \
    --plot-diagnostics active_batches approx_kl std --out "$OUT/ppo_amber_ppo_pendulum_200"

# SACReFER against SB3 SAC on HalfCheetah-v5 at 100k steps (step-based), its ablation (ReF-ER's rules off: SAC's
# replay in the same class) beside them in the same invocation.
python -m benchmarks run --algos sac sac_refer "sac_refer[refer_rules=[]]" --env HalfCheetah-v5 --first-seed 100 \
    --seeds 3 --steps 100000 --eval-freq 5000 --eval-episodes 10 --jobs 2 --torch-threads 1 --order interleaved \
    --plot-diagnostics beta far_fraction ent_coef --out "$OUT/sac_refer_sac_100k"
# The line above makes the whole table. The committed data came in three parts (2026-11-30): that line stopped after
# its first run (SAC, seed 100) on a --plot-diagnostics fault since fixed; SACReFER's and the ablation's seed 100
# were appended (`--algos sac_refer "sac_refer[refer_rules=[]]" --first-seed 100 --seeds 1 --append --baseline sac`),
# then all three on seeds 101-102 (`--first-seed 101 --seeds 2 --append --baseline sac`), the other options as above.

# PTR-PPO's steps to PPO's return on CartPole-v1, at the yml budget of both (100k steps, step-based).
python -m benchmarks run --algos ppo ptr_ppo --env CartPole-v1 --first-seed 100 --seeds 3 --steps 100000 \
    --eval-freq 5000 --eval-episodes 10 --jobs 1 --torch-threads 1 --out "$OUT/ptr_ppo_ppo_cartpole"
# Its ablation (replay off, all else equal), appended on the same seeds in a later sitting (issue 64).
python -m benchmarks run --algos "ptr_ppo[replay_rounds=0]" --env CartPole-v1 --first-seed 100 --seeds 3 --steps 100000 \
    --eval-freq 5000 --eval-episodes 10 --jobs 1 --torch-threads 1 --append --baseline ppo --out "$OUT/ptr_ppo_ppo_cartpole"
# The row after its search (ptr_ppo.yml, CartPole-v1: 5 replay rounds, synchronous collection; the Tuning log) on
# fresh seeds, PPO and the ablation beside it in one invocation (issue 64). With replay off and synchronous
# collection the ablation is SB3 PPO's update (tests/test_ptr_ppo.py); it runs all the same, as the row's ablation.
python -m benchmarks run --algos ppo ptr_ppo "ptr_ppo[replay_rounds=0]" --env CartPole-v1 --first-seed 200 --seeds 5 \
    --steps 100000 --eval-freq 5000 --eval-episodes 10 --jobs 1 --torch-threads 1 --order interleaved \
    --out "$OUT/ptr_ppo_ppo_cartpole_200"

# PTR-PPO under the Atari protocol: 160k steps (the paper's Table 2 budget), 10 stochastic whole games every 20k.
python -m benchmarks run --algos ppo ptr_ppo --env AtlantisNoFrameskip-v4 QbertNoFrameskip-v4 UpNDownNoFrameskip-v4 \
    BreakoutNoFrameskip-v4 --first-seed 100 --seeds 3 --steps 160000 --eval-freq 20000 --eval-episodes 10 --jobs 1 \
    --torch-threads 1 --out "$OUT/ptr_ppo_atari"
# Its re-measurement after the entropy search (ptr_ppo.yml, atari: ent_coef 0.01) on fresh seeds, PPO and the
# ablation (replay off, all else equal) beside it in the same invocation per seed; run over sittings as
# --first-seed N --seeds K (--append after the first), with --jobs 2 or as two --jobs 1 invocations on different games
# side by side (2026-11-29; one invocation at a time appends to a game's table).
python -m benchmarks run --algos ppo ptr_ppo "ptr_ppo[replay_rounds=0]" --env AtlantisNoFrameskip-v4 \
    QbertNoFrameskip-v4 UpNDownNoFrameskip-v4 BreakoutNoFrameskip-v4 --first-seed 200 --seeds 5 --order interleaved \
    --steps 160000 --eval-freq 20000 --eval-episodes 10 --jobs 1 --torch-threads 1 --out "$OUT/ptr_ppo_atari_200"

# Wall-clock lines: alone on the machine, one run at a time, PyTorch's default threads.
python -m benchmarks run --algos sac vracer --env HalfCheetah-v5 --first-seed 100 --seeds 3 --steps 10000000 \
    --max-seconds 1200 --eval-seconds 60 --eval-episodes 10 --out "$OUT/vracer_sac_halfcheetah_20min"
# Its ablation (ReF-ER's rules off) on fresh seeds, SAC and V-RACER beside it in the same invocation (a wall-clock
# ablation appended on another day would compare the days too); about 70 minutes alone per seed, so it ran one seed
# per invocation (--first-seed N --seeds 1, with --append from 201 on), seeds 200-202 on 2026-11-30 (Intel Xeon x2).
python -m benchmarks run --algos sac vracer "vracer[refer_rules=[]]" --env HalfCheetah-v5 --first-seed 200 --seeds 3 \
    --order interleaved --steps 10000000 --max-seconds 1200 --eval-seconds 60 --eval-episodes 10 \
    --out "$OUT/vracer_sac_halfcheetah_20min_200"
python -m benchmarks run --algos ppo impact --env HalfCheetah-v5 --first-seed 100 --seeds 3 --steps 10000000 \
    --max-seconds 600 --eval-seconds 30 --eval-episodes 10 --out "$OUT/impact_ppo_600s"
# Its ablation (the collector in the learner's loop, all else equal), appended on the same seeds alone on the
# machine in later sittings (issue 64): seeds 100-101, then --first-seed 102 --seeds 1 (both 2026-11-28).
python -m benchmarks run --algos "impact[collector=sync]" --env HalfCheetah-v5 --first-seed 100 --seeds 2 \
    --order interleaved --steps 10000000 --max-seconds 600 --eval-seconds 30 --eval-episodes 10 --append \
    --baseline ppo --out "$OUT/impact_ppo_600s"
# The entry and its ablation re-timed in one invocation, alone, on tuning seeds, 120 s each (2026-11-28): the rates
# above come from different sittings. A tuning table: it writes into docs/benchmarks/tuning/ itself.
python -m benchmarks run --algos impact "impact[collector=sync]" --env HalfCheetah-v5 --first-seed 0 --seeds 2 \
    --order interleaved --steps 10000000 --max-seconds 120 --eval-seconds 30 --eval-episodes 10 \
    --out docs/benchmarks/tuning/impact_halfcheetah_rate
# So the row's entry and ablation on fresh seeds in one invocation, PPO beside them: about 100 minutes alone for the
# nine runs (107 on 2026-11-29, on the Intel Xeon with 2 cores of the IMPALA table of seeds 200-202).
python -m benchmarks run --algos ppo impact "impact[collector=sync]" --env HalfCheetah-v5 --first-seed 200 --seeds 3 \
    --order interleaved --steps 10000000 --max-seconds 600 --eval-seconds 30 --eval-episodes 10 \
    --out "$OUT/impact_ppo_600s_200"
# The entropy search's winner (docs/algorithms/impact.md, Tuning log) on fresh seeds, under its variant name (the
# yml entry since it reported: impact.yml, HalfCheetah-v5), with PPO and its ablation in one invocation; about 12
# minutes alone per run. Seeds 300-301 and 302-304 (--first-seed 302 --seeds 3 --append) in two sittings of
# 2026-11-29 on the same machine kind. The README's IMPACT HalfCheetah-v5 row.
python -m benchmarks run --algos ppo "impact[ent_coef=0.01]" "impact[ent_coef=0.01,collector=sync]" --env HalfCheetah-v5 \
    --first-seed 300 --seeds 5 --order interleaved --steps 10000000 --max-seconds 600 --eval-seconds 30 \
    --eval-episodes 10 --out "$OUT/impact_ent_ppo_600s_300"
# The target-worker clipping's ablation (the paper's R_1, target_worker_clip=inf; docs/algorithms/impact.md, Tuning
# log), declared on 2026-11-30 and appended to the same seeds alone (59 minutes on 2026-11-30, forty-second
# sitting, on the table's machine kind and software). Its table against the entry: impact_ent_clip_300.
python -m benchmarks run --algos "impact[ent_coef=0.01,target_worker_clip=.inf]" --baseline ppo --env HalfCheetah-v5 \
    --first-seed 300 --seeds 5 --order interleaved --steps 10000000 --max-seconds 600 --eval-seconds 30 \
    --eval-episodes 10 --append --out "$OUT/impact_ent_ppo_600s_300"
python -m benchmarks run --algos "$PPO_DEFAULTS" impact --env Hopper-v5 --first-seed 100 --seeds 3 --steps 10000000 \
    --max-seconds 600 --eval-seconds 30 --eval-episodes 10 --out "$OUT/impact_ppo_hopper_600s"
# Its re-measurement after the entropy search (impact.yml, Hopper-v5), on fresh seeds, with the ablation beside it
# (the same settings, the collector in the learner's loop): seeds 200-202 for all three, then 203-204 for IMPACT
# and PPO (five seeds for a changed entry, three for its ablation).
python -m benchmarks run --algos "$PPO_DEFAULTS" impact "impact[collector=sync]" --env Hopper-v5 --first-seed 200 \
    --order interleaved --seeds 3 --steps 10000000 --max-seconds 600 --eval-seconds 30 --eval-episodes 10 \
    --out "$OUT/impact_ppo_hopper_600s_200"
python -m benchmarks run --algos "$PPO_DEFAULTS" impact --env Hopper-v5 --first-seed 203 --order interleaved \
    --seeds 2 --steps 10000000 --max-seconds 600 --eval-seconds 30 --eval-episodes 10 --append \
    --out "$OUT/impact_ppo_hopper_600s_200"
# The ablation's seeds 203-204, appended in a later sitting: three seeds left its comparison inside the spread.
python -m benchmarks run --algos "impact[collector=sync]" --env Hopper-v5 --first-seed 203 --order interleaved \
    --seeds 2 --steps 10000000 --max-seconds 600 --eval-seconds 30 --eval-episodes 10 --append \
    --baseline "$PPO_DEFAULTS" --out "$OUT/impact_ppo_hopper_600s_200"
python -m benchmarks run --algos ppo impala --env HalfCheetah-v5 --first-seed 100 --seeds 3 --steps 100000000 \
    --max-seconds 600 --eval-seconds 30 --eval-episodes 10 --out "$OUT/impala_ppo_600s"
# Its ablation (issue 64: IMPALA's asynchronous collector against the entry's sync one) on fresh seeds, with the entry
# and PPO in the same invocation: an ablation appended on another day compares the days' machine speeds too (the
# IMPACT HalfCheetah-v5 row above). About 100 minutes alone for the nine runs (107 on 2026-11-29, an Intel Xeon with 2
# cores: a later --append must run on that machine kind).
python -m benchmarks run --algos ppo impala "impala[collector=process]" --env HalfCheetah-v5 --first-seed 200 \
    --seeds 3 --order interleaved --steps 100000000 --max-seconds 600 --eval-seconds 30 --eval-episodes 10 \
    --out "$OUT/impala_ppo_600s_200"
# The process collector as the entry's candidate (docs/algorithms/impala.md, "Tuning log"), on fresh seeds since
# 200-202 chose it, its ablation (the entry's sync collector) and PPO beside it: about 36 minutes alone per seed, so
# over sittings on one machine kind (Intel Xeon x2): seeds 300-302 on 2026-11-29/30 (--seeds 2, then --first-seed 302
# --seeds 1 --append), 303-304 on 2026-11-30 (--first-seed 303 --seeds 2 --append).
python -m benchmarks run --algos ppo "impala[collector=process]" impala --env HalfCheetah-v5 --first-seed 300 \
    --seeds 5 --order interleaved --steps 100000000 --max-seconds 600 --eval-seconds 30 --eval-episodes 10 \
    --out "$OUT/impala_process_ppo_600s_300"
# The annealed learning rate as the candidate (docs/algorithms/impala.md, "Tuning log": lin_1e-4 on the process
# collector won the step-based question on tuning seeds 0-1), its ablation (the same schedule on the sync collector)
# and PPO; --steps 2600000 is about what the process collector samples in 600 s, so that its schedule ends with the
# budget. About 36 minutes alone per seed, one seed per invocation on one machine kind (Intel Xeon x2): seed 400 on
# 2026-11-30 (--seeds 1), 401-404 appended one at a time later that day (--first-seed N --seeds 1 --append).
python -m benchmarks run --algos ppo "impala[collector=process,learning_rate=lin_1e-4]" "impala[learning_rate=lin_1e-4]" \
    --env HalfCheetah-v5 --first-seed 400 --seeds 5 --order interleaved --steps 2600000 --max-seconds 600 \
    --eval-seconds 30 --eval-episodes 10 --out "$OUT/impala_lin_ppo_600s_400"
