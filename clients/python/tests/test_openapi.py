"""Checks the client's OPERATIONS against Ferry's OpenAPI document: every
operation the client calls exists with the same method, path, operationId
and parameters, and the client sends every parameter the API requires."""

import json
import pathlib
import unittest

from ferry_client import OPERATIONS

SPEC = pathlib.Path(__file__).resolve().parents[3] / "services" / "api" / "openapi.json"


def resolve(spec, param):
    if "$ref" in param:
        node = spec
        for part in param["$ref"].lstrip("#/").split("/"):
            node = node[part]
        return node
    return param


class OpenAPITest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.spec = json.loads(SPEC.read_text())

    def test_every_operation_exists(self):
        for op_id, op in OPERATIONS.items():
            with self.subTest(operation=op_id):
                self.assertEqual(op.operation_id, op_id)
                item = self.spec["paths"].get(op.path)
                self.assertIsNotNone(item, f"{op.path} is not in openapi.json")
                method = item.get(op.method.lower())
                self.assertIsNotNone(method, f"{op.method} {op.path} is not in openapi.json")
                self.assertEqual(method.get("operationId"), op_id)

    def test_parameters_match(self):
        for op_id, op in OPERATIONS.items():
            with self.subTest(operation=op_id):
                method = self.spec["paths"][op.path][op.method.lower()]
                params = [resolve(self.spec, p) for p in
                          self.spec["paths"][op.path].get("parameters", []) + method.get("parameters", [])]
                by_place = {place: {p["name"] for p in params if p["in"] == place}
                            for place in ("path", "query", "header")}
                required = {(p["in"], p["name"]) for p in params if p.get("required")}
                sent = ({("path", n) for n in op.path_params} | {("query", n) for n in op.query_params}
                        | {("header", n) for n in op.header_params})
                self.assertEqual(set(op.path_params), by_place["path"], "path parameters")
                for place, name in sent:
                    self.assertIn(name, by_place[place], f"{place} parameter {name} is not in openapi.json")
                self.assertLessEqual(required, sent, "parameters the API requires but the client does not send")

    def test_list_sends_every_filter(self):
        # listJobs is the one operation whose filters a user picks from: all of them.
        method = self.spec["paths"]["/v1/jobs"]["get"]
        names = {resolve(self.spec, p)["name"] for p in method.get("parameters", [])
                 if resolve(self.spec, p)["in"] == "query"}
        self.assertEqual(set(OPERATIONS["listJobs"].query_params), names)


if __name__ == "__main__":
    unittest.main()
