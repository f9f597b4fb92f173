#!/usr/bin/env python3
"""Prints the YAML documents of the files given (or of stdin, for "-") as one JSON array,
empty documents left out, so tests/it/deploy.rs can check manifests with serde_json.

    python3 scripts/yaml-to-json.py deploy/kubernetes/daemonset.yaml

Needs PyYAML, which `pip install kubernetes-validate` (scripts/test.sh) brings.
"""

import json
import sys

try:
    import yaml
except ImportError:
    print("PyYAML is missing: pip install kubernetes-validate (it brings PyYAML)", file=sys.stderr)
    sys.exit(3)


def main() -> int:
    documents = []
    for name in sys.argv[1:] or ["-"]:
        text = sys.stdin.read() if name == "-" else open(name, encoding="utf-8").read()
        try:
            documents.extend(d for d in yaml.safe_load_all(text) if d is not None)
        except yaml.YAMLError as e:
            print(f"{name}: {e}", file=sys.stderr)
            return 1
    json.dump(documents, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
