"""Training stages of the policy: supervised fine-tuning on oracle and synthetic trajectories
(`forgeline.train.sft`), the value model pretrained on offline rollouts (`forgeline.train.critic`)
and PPO of a LoRA adapter against it (`forgeline.train.ppo`), on the pure RL math of
`forgeline.train.rl`."""
