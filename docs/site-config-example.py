"""A site's cluster for fabreg: copy to site.py, rename, edit (see docs/site.md).

    reframe -C reframe-config.py -C site.py -c checks/ -r

ReFrame loads both files; the systems of the later file come first, so this one is
picked on the hosts its ``hostnames`` match. Pin an acceptance run to the nodes a
change touched without editing anything:

    FABREG_RESERVATION=fabric-change-42 reframe -C reframe-config.py -C site.py ...
    FABREG_NODELIST='nid[0012-0013]'  (every job then spans exactly these nodes)
    reframe ... -J reservation=fabric-change-42   (ReFrame's own per-job option)
"""

from fabreg.run.siteconfig import slurm_partition

MPIS = ['openmpi', 'mpich']

site_configuration = {
    'systems': [{
        'name': 'examplesite',
        'descr': 'Example cluster: HDR InfiniBand nodes behind Slurm',
        'hostnames': [r'^login\d+\.example\.org$'],
        'modules_system': 'lmod',
        'partitions': [
            # account, reservation, --exclusive (default), constraint: sbatch options.
            slurm_partition('batch', environs=MPIS, max_nodes=4, account='hpc-ops',
                            constraint='ib_hdr',
                            extras={'rdma_devices': ['mlx5_0:1'], 'tcp_interfaces': ['ib0']}),
        ],
    }],
    'environments': [
        # No 'launcher' extra: ranks start with the partition's srun.
        {'name': 'openmpi', 'target_systems': ['examplesite'], 'modules': ['openmpi/4.1.6'],
         'cc': 'mpicc', 'features': ['mpi'], 'env_vars': [['SLURM_MPI_TYPE', 'pmix']],
         'extras': {'mpi': 'openmpi'}},
        {'name': 'mpich', 'target_systems': ['examplesite'], 'modules': ['mpich/4.1.2'],
         'cc': 'mpicc', 'features': ['mpi'], 'env_vars': [['SLURM_MPI_TYPE', 'pmi2']],
         'extras': {'mpi': 'mpich'}},
    ],
}
