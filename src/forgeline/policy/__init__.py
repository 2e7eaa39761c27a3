"""The policy layer: tokenizer, tiny Qwen3 model, base-model resolution, chat protocol, engines.

- `tokenizer`: byte-level BPE trained locally, Qwen3 special tokens and chat template.
- `model`: a tiny Qwen3ForCausalLM initialised from a seed (same LoRA targets as Qwen3-8B).
- `hub`: the real base model from the Hugging Face hub, pinned to a commit, with digests.
- `chat`: tool schemas (bash, submit, edit), prompt rendering, tool-call parsing.
- `engine`: `Engine.generate` over transformers (`HFEngine`) or an OpenAI-compatible server.
- `init_stage`: the `policy-init` stage (tokenizer + initial tiny model folder).

Nothing is imported here on purpose: importing any policy module runs this file, so whatever
it imported would be part of the code of every stage that uses one (`forgeline.codedeps`).
"""
