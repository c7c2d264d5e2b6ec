"""ReFrame configuration for fabreg.

Systems: ``local`` (any host not matched by another system; local scheduler);
``minicluster`` (the emulated Slurm cluster of ``fabreg cluster up``, chosen only
with ``--system minicluster``; see docs/cluster.md). A real cluster adds its own
system in a second file: ``-C reframe-config.py -C site.py`` (docs/site.md).
Environments: one per MPI implementation (``openmpi``, ``mpich``, ``mvapich2``).
An environment whose MPI is not installed stays defined: the checks skip it
with a reason (see ``fabreg.testlib.mpi``), so nothing is dropped silently.

Environment ``extras`` used by the checks:

- ``mpi``: the implementation name (the ``mpi`` perflog column);
- ``launcher``: argv that starts ranks, with ``{num_tasks}``,
  ``{num_tasks_per_node}`` and ``{num_nodes}`` placeholders; leave it out to use
  the partition's launcher (e.g. ``srun`` on a site cluster);
- ``osu_prefix``: an OSU Micro-Benchmarks install prefix; when set, the checks
  run the real OSU binaries instead of the bundled probes;
- ``provider``: where benchmarks come from, ``spack``, ``prefix``, ``probes`` or
  ``auto`` (default: $FABREG_PROVIDER, else ``auto`` = ``osu_prefix`` if set, else
  the probes); ``spack_mpi``: the MPI spec the Spack-built benchmarks must depend on
  (default: the ``mpi`` name).

Partition ``extras`` used by the checks (docs/transports.md):

- ``max_nodes``: nodes one job may span (default 1); the ``nodes`` parameter
  runs 1, 2, 4, ... up to it;
- ``ranks_per_node``: ranks per node for collectives (default 2 on one node, 1 across);
- ``rdma_devices`` / ``tcp_interfaces``: devices the transports must use
  (``UCX_NET_DEVICES``, ``btl_tcp_if_include``, ``MV2_IBA_HCA``);
- ``transports``: the transports the partition offers, when detection on the
  host that runs ReFrame would not tell (e.g. a login node without RDMA devices);
- ``spack_site``, ``spack_without``, ``spack_install_tree``: how the Spack provider
  builds spack.yaml there (fabreg.testlib.spack, docs/spack.md).
"""

import os
import shlex
import shutil

from fabreg.cluster import reframe_system as minicluster
from fabreg.testlib import prompt_squeue

FABREG_ROOT = os.path.dirname(os.path.abspath(__file__))
PERFLOG_DIR = os.environ.get('FABREG_PERFLOG_DIR', os.path.join(FABREG_ROOT, 'perflogs'))


def _first_on_path(*names):
    """The first command found on PATH, else the first name (the check then skips)."""
    for name in names:
        if shutil.which(name):
            return name
    return names[0]


def _prefixed(env_var, tool, fallback):
    """A tool from an install prefix named by ``env_var``, else ``fallback``."""
    prefix = os.environ.get(env_var)
    return os.path.join(prefix, 'bin', tool) if prefix else fallback


def _osu_prefix(mpi):
    """Where real OSU binaries for ``mpi`` live, if the user said so."""
    return os.environ.get(f'FABREG_OSU_PREFIX_{mpi.upper()}', '')


# The fabric change an acceptance run is for (ticket, firmware version...): the session's
# `change` extra in the results database. Commas and '=' would split ReFrame's key=value list.
FABREG_CHANGE = (os.environ.get('FABREG_CHANGE', '').strip().replace(',', ';').replace('=', ':')
                 or 'unspecified')
ACCEPTANCE_REPEATS = int(os.environ.get('FABREG_ACCEPTANCE_REPEATS', '3'))

_OMPI_AS_ROOT = {
    # Harmless for normal users; lets OpenMPI start ranks on root-only CI hosts.
    'OMPI_ALLOW_RUN_AS_ROOT': '1',
    'OMPI_ALLOW_RUN_AS_ROOT_CONFIRM': '1',
}

local_environments = [
    {
        'name': 'openmpi',
        'target_systems': ['local'],
        'cc': _prefixed('FABREG_OPENMPI_PREFIX', 'mpicc',
                        _first_on_path('mpicc.openmpi', 'mpicc')),
        'cflags': ['-O2'],
        'env_vars': [list(kv) for kv in _OMPI_AS_ROOT.items()],
        'features': ['mpi'],
        'extras': {
            'mpi': 'openmpi',
            'launcher': [_prefixed('FABREG_OPENMPI_PREFIX', 'mpirun',
                                   _first_on_path('mpirun.openmpi', 'mpirun')),
                         '-np', '{num_tasks}'],
            'osu_prefix': _osu_prefix('openmpi'),
        },
    },
    {
        'name': 'mpich',
        'target_systems': ['local'],
        'cc': _prefixed('FABREG_MPICH_PREFIX', 'mpicc', 'mpicc.mpich'),
        'cflags': ['-O2'],
        'features': ['mpi'],
        'extras': {
            'mpi': 'mpich',
            'launcher': [_prefixed('FABREG_MPICH_PREFIX', 'mpiexec', 'mpiexec.mpich'),
                         '-n', '{num_tasks}'],
            'osu_prefix': _osu_prefix('mpich'),
        },
    },
    {
        'name': 'mvapich2',
        'target_systems': ['local'],
        'cc': _prefixed('FABREG_MVAPICH2_PREFIX', 'mpicc', 'mpicc.mvapich2'),
        'cflags': ['-O2'],
        'features': ['mpi'],
        'extras': {
            'mpi': 'mvapich2',
            'launcher': [_prefixed('FABREG_MVAPICH2_PREFIX', 'mpiexec', 'mpiexec.mvapich2'),
                         '-n', '{num_tasks}'],
            'osu_prefix': _osu_prefix('mvapich2'),
            'spack_mpi': 'mvapich2 fabrics=mrail',
            'install_hint': ('build it with Spack (spack install mvapich2, see docs/spack.md) '
                             'and set FABREG_MVAPICH2_PREFIX to its install prefix'),
        },
    },
]

# Columns of the test that are not worth a perflog column (ReFrame's `check_#ALL`
# otherwise logs every loggable attribute). What stays: time, names, job, nodes,
# every parameter and fabreg's own loggable variables. See docs/perflog-format.md.
PERFLOG_IGNORE = [f'check_{name}' for name in (
    'build_locally', 'build_time_limit', 'descr', 'env_vars', 'exclusive_access',
    'executable', 'executable_opts', 'extra_resources', 'keep_files', 'local', 'maintainers',
    'max_pending_time', 'modules', 'num_cpus_per_task', 'num_gpus_per_node',
    'num_tasks_per_core', 'num_tasks_per_socket', 'outputdir', 'perfvalues', 'postbuild_cmds',
    'postrun_cmds', 'prebuild_cmds', 'prefix', 'prerun_cmds', 'readonly_files', 'sourcepath',
    'sourcesdir', 'stagedir', 'strict_check', 'time_limit', 'use_multithreading',
    'valid_prog_environs', 'valid_systems', 'variables', 'short_name', 'unique_name',
    'job_completion_time', 'job_completion_time_unix', 'job_submit_time', 'job_exitcode',
    'system_name', 'partition_name', 'environ_name', 'jobid', 'job_nodelist', 'name',
    'display_name', 'environ', 'partition', 'system',
)]

if minicluster.selected():
    minicluster.use_cluster()  # SLURM_CONF for sbatch/squeue; a clear error if it is down

# ReFrame uses the first `general` entry that matches the system, so each entry names them.
_CHECK_SEARCH = {
    'check_search_path': [os.path.join(FABREG_ROOT, 'checks')],
    'check_search_recursive': True,
}

site_configuration = {
    'systems': [
        {
            'name': 'local',
            'descr': 'This machine, local scheduler (default for any unmatched host)',
            'hostnames': ['.*'],
            'modules_system': 'nomod',
            'partitions': [
                {
                    'name': 'default',
                    'descr': 'All cores of this host',
                    'scheduler': 'local',
                    'launcher': 'local',
                    # builtin: checks without MPI (perftest, ucx_perftest).
                    'environs': ['openmpi', 'mpich', 'mvapich2', 'builtin'],
                    # Benchmarks must not share the host with each other.
                    'max_jobs': 1,
                    'extras': {
                        'max_nodes': 1,
                        # One machine, not a cluster of like nodes: judged by this
                        # host's baseline (`fabreg references calibrate`).
                        'references_by_host': True,
                        # Spack here: Debian's OpenMPI/MPICH as externals
                        # (spack/sites/local.yaml); no MVAPICH2 and no OSU tarball in
                        # the local mirror, so the Spack provider builds the probes.
                        'spack_without': ['mvapich2', 'osu-micro-benchmarks'],
                    },
                },
            ],
        },
        minicluster.system(environs=['openmpi', 'mpich', 'mvapich2', 'builtin'],
                           scheduler=prompt_squeue.NAME),
    ],
    'environments': local_environments + minicluster.environments(local_environments),
    # --mode nightly | acceptance | quick (docs/references.md#modes)
    'modes': [
        {'name': 'quick', 'options': ['--tag=quick']},
        {'name': 'nightly', 'options': ['--session-extras=mode=nightly']},
        {'name': 'acceptance', 'options': [
            '--setvar=references_required=1',
            f'--repeat={ACCEPTANCE_REPEATS}',
            shlex.quote(f'--session-extras=mode=acceptance,change={FABREG_CHANGE}'),
        ]},
    ],
    'general': [
        # The two single-host systems run one job at a time (max_jobs: 1), so every second
        # ReFrame sleeps between a job's end and its next poll is a second the run waits.
        # ReFrame's polling starts at 10 a second and slows to one in 10 s on a long job
        # (poll_rate_min 0.1): about 2.5 s of the 4-node run's time per job. A real
        # cluster's partitions keep ReFrame's rate (ci/bench/poll_overhead_bench.py).
        {
            # A poll is a waitpid on this host: 10 a second all along (a job of 1-3 s
            # lost 0.1-0.3 s to the slowing polls, 85 jobs a `make run`).
            'target_systems': ['local'],
            **_CHECK_SEARCH,
            'poll_rate_min': 10,
        },
        {
            # A poll looks at Slurm's job completion log and calls `squeue` only when a job
            # ended, or once a second (fabreg.testlib.prompt_squeue): 10 a second as well.
            'target_systems': ['minicluster'],
            **_CHECK_SEARCH,
            'poll_rate_min': 10,
        },
        _CHECK_SEARCH,
    ],
    'storage': [
        {
            'enable': True,
            'sqlite_db_file': os.path.join(PERFLOG_DIR, 'results.db'),
        },
    ],
    'logging': [
        {
            # ReFrame's own debug log of the last run, in the directory it ran from (ReFrame's
            # default leaves a new /tmp/rfm-*.log of each run, hundreds of KB at debug2;
            # only the few lines it logs before reading this file still go there)
            'handlers': [
                {
                    'type': 'file',
                    'name': 'reframe.log',
                    'level': 'debug',
                    'format': '[%(asctime)s] %(levelname)s: %(check_info)s: %(message)s',
                    'append': False,
                },
            ],
            'handlers_perflog': [
                {
                    'type': 'filelog',
                    'prefix': '%(check_system)s/%(check_partition)s',
                    'basedir': PERFLOG_DIR,
                    'level': 'info',
                    'format': (
                        '%(check_job_completion_time)s|reframe %(version)s|'
                        '%(check_name)s|%(check_system)s|%(check_partition)s|'
                        '%(check_environ)s|%(check_jobid)s|%(check_job_nodelist)s|'
                        '%(check_result)s|%(check_#ALL)s|%(check_perfvalues)s'
                    ),
                    'format_perfvars': (
                        '%(check_perf_value)s|%(check_perf_unit)s|%(check_perf_ref)s|'
                        '%(check_perf_lower_thres)s|%(check_perf_upper_thres)s|'
                        '%(check_perf_result)s|'
                    ),
                    'datefmt': '%FT%T%:z',
                    'ignore_keys': PERFLOG_IGNORE,
                    'append': True,
                },
            ],
        },
    ],
}
