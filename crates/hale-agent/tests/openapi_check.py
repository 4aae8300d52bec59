"""Checks the agent's OpenAPI document against the types it describes.

Usage: openapi_check.py OPENAPI_JSON SAMPLES_JSON

1. The document passes openapi-spec-validator (OpenAPI 3.1).
2. SAMPLES_JSON maps every schema of components.schemas to instances the
   Rust types serialize to (written by tests/it/openapi.rs): every schema
   has some, each validates against its schema (openapi-schema-validator,
   with objects closed: a field the type has and the schema lacks fails),
   and each property a schema declares appears in one of its samples (a
   field the schema has and the type lacks fails).

Prints what disagrees and exits 1; exits 0 when all agrees.
"""

import copy
import json
import sys

from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate


def resolve(node, schemas):
    """The schema with every $ref inlined and every object closed."""
    if isinstance(node, list):
        return [resolve(x, schemas) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        return resolve(schemas[name], schemas)
    out = {k: resolve(v, schemas) for k, v in node.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def main():
    spec = json.load(open(sys.argv[1]))
    samples = json.load(open(sys.argv[2]))
    validate(spec)
    schemas = spec["components"]["schemas"]
    problems = []
    for name in schemas:
        if not samples.get(name):
            problems.append(f"{name}: no sample of a Rust type")
    for name in samples:
        if name not in schemas:
            problems.append(f"{name}: sampled, but no such schema")
    for name, instances in samples.items():
        if name not in schemas:
            continue
        closed = resolve(copy.deepcopy(schemas[name]), schemas)
        validator = OAS31Validator(closed)
        for i, instance in enumerate(instances):
            for e in validator.iter_errors(instance):
                where = "/".join(str(p) for p in e.absolute_path)
                problems.append(f"{name} sample {i} at /{where}: {e.message}")
        seen = set()
        for instance in instances:
            if isinstance(instance, dict):
                seen.update(instance)
        for prop in schemas[name].get("properties", {}):
            if prop not in seen:
                problems.append(f"{name}.{prop}: in the schema, in no sample of its type")
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
