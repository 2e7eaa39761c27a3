"""The code agent: one episode (agent <-> sandbox <-> engine), rewards, concurrent rollouts, oracle trajectories and mini-swe-agent export (see docs/agent.md)."""
