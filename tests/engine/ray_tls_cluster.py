"""A Ray cluster on 127.0.0.1 for the TLS test, run as its own process with RAY_USE_TLS set.

    python ray_tls_cluster.py TEMP_DIR RESOURCES_JSON

Starts a head (no CPUs, no dashboard) and one worker node offering RESOURCES_JSON, prints
`{"address": …, "node": …}` on one line, and shuts the cluster down when stdin closes. The
TLS variables come from this process's environment, as they would for `ray start`.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read when ray is imported: every node on 127.0.0.1

from ray.cluster_utils import Cluster  # noqa: E402


def main() -> None:
    temp_dir, resources = sys.argv[1], json.loads(sys.argv[2])
    os.environ["RAY_TMPDIR"] = temp_dir  # Ray's address file there, not in a /tmp/ray other clusters share
    os.makedirs(os.path.join(temp_dir, "ray"), exist_ok=True)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False, "temp_dir": temp_dir, "node_ip_address": "127.0.0.1"})
    try:
        node = cluster.add_node(num_cpus=1, resources=resources)
        cluster.wait_for_nodes()
        print(json.dumps({"address": cluster.address, "node": node.node_id}), flush=True)
        sys.stdin.read()
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
