"""Training stages of the policy: supervised fine-tuning on oracle and synthetic trajectories
(`forgeline.train.sft`, its synthetic data `forgeline.train.synthetic`), the value model
pretrained on offline rollouts (`forgeline.train.critic`), PPO of a LoRA adapter against it
(`forgeline.train.ppo`: a step; `ppo_update`: the update; `ppo_checkpoints`: resume state and
the adapter's files; `distributed`: torchrun) and GRPO without a critic (`grpo`, `grpo_update`),
both run by `rl_stage` (the step loop, the checkpoint series, warm start; `series`: its names),
on the pure RL math of `forgeline.train.rl`."""
