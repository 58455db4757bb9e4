from setuptools import find_packages, setup

setup(
    name='kopf',
    version='0.1.0',
    description='Kubernetes Operator Pythonic Framework',
    python_requires='>=3.10',
    packages=find_packages(include=['kopf', 'kopf.*']),
    package_data={'kopf': ['py.typed']},
    entry_points={'console_scripts': ['kopf = kopf.cli:console']},
    install_requires=[
        'aiohttp',
        'pykube-ng',
        'pyyaml',
        'click',
        'typing_extensions',
        'jsonpatch',  # JSON patches: mutating webhooks' answers, and transformation functions (patch.fns)
    ],
    extras_require={
        # Admission webhooks served with self-signed certificates (development servers, tunnels);
        # 'dev' is the name Kopf's users know it by.
        'webhooks': ['cryptography'],
        'dev': ['cryptography'],
    },
)
