"""Training stages of the policy: supervised fine-tuning on oracle and synthetic trajectories
(`forgeline.train.sft`, its synthetic data `forgeline.train.synthetic`), the value model
pretrained on offline rollouts (`forgeline.train.critic`) and PPO of a LoRA adapter against it
(`forgeline.train.ppo`: the step loop; `ppo_update`: the update; `ppo_checkpoints`: resume state
and the adapter's files; `distributed`: torchrun), on the pure RL math of `forgeline.train.rl`."""
