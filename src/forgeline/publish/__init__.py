"""Publish: the run's results as hub-ready repositories, and their upload.

| module | what |
|---|---|
| `card.py` | pure: the adapter's model card from plain data; the "## Files" table every published card carries, and its parse |
| `adapter.py` | stage `publish-adapter` (rule `publish_adapter`): results/publish/adapter/, the PEFT files, checkpoint-summary.json, the base where it is on no hub, and the card, all read from the run's artifacts and manifests |
| `upload.py` | tool `forgeline publish`: checks each folder against its card, then uploads it with `huggingface_hub.upload_folder` (a user action, never a rule) |

The dataset's folder (results/dataset/hf) is made by `forgeline export-dataset`
(`forgeline.tasks.export`); `forgeline publish` uploads it beside the adapter. Config: the
`publish` section (`card`: the adapter card's license and tags; `hub`: repository ids, private,
the endpoint's timeout). See docs/publish.md.
"""
from __future__ import annotations
