"""Training stages of the policy: supervised fine-tuning on oracle and synthetic trajectories
(`forgeline.train.sft`); PPO comes later."""
