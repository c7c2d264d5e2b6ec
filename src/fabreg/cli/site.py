"""``fabreg site init``: write a site configuration from the live Slurm cluster."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fabreg.run import site_init


def register(subparsers: argparse._SubParsersAction) -> None:
    site = subparsers.add_parser("site", help="a site configuration from the live cluster")
    actions = site.add_subparsers(dest="site_action", required=True)
    init = actions.add_parser(
        "init", help="read Slurm, probe one idle node per partition, write site.py",
        description="Read the partitions and nodes from Slurm (scontrol), run one short job "
                    "(srun, 2 min limit) on an idle node of each partition to see its UCX "
                    "transports, RDMA devices, interfaces, GPUs and MPIs, and write a "
                    "commented ReFrame site configuration (docs/site.md). Nothing else on "
                    "the cluster changes.")
    init.add_argument("--system", default="", help="the system's name (default: Slurm's "
                      "ClusterName, else 'mysite')")
    init.add_argument("--out", type=Path, default=Path("site.py"), help="default: site.py")
    init.add_argument("--partitions", default="", help="only these, comma-separated")
    init.add_argument("--force", action="store_true", help="replace an existing --out file")
    init.set_defaults(func=run_init)


def run_init(args: argparse.Namespace) -> int:
    site_init.refuse_existing(args.out, args.force)  # before anything runs
    partitions, nodes = site_init.read_slurm()
    wanted = [p for p in args.partitions.split(",") if p]
    site_init.check_partitions(partitions, wanted)  # before any job runs
    config = site_init.slurm_config()
    system = args.system or config.get("ClusterName") or "mysite"
    print(f"fabreg: probing {len(wanted) or len(partitions)} partition(s) of {system} "
          "(one short job each)", file=sys.stderr)
    surveys = site_init.survey(partitions, nodes, wanted)
    for line in site_init.report(surveys):
        print(line)
    text = site_init.render(system, surveys, site_init.login_host(),
                            site_init.scheduler_for(config))
    site_init.write_site(args.out, text, args.force)
    print(f"wrote {args.out}: reframe -C reframe-config.py -C {args.out} -c checks/ -r "
          f"--system {system}")
    return 0
