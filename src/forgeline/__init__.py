"""forgeline: a declarative DAG build system for reproducible code-agent RL artifacts."""
__version__ = "0.1.0"
