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
        'cryptography',  # self-signed certificates of the webhook servers
        'jsonpatch',  # mutations answered to the API server as JSONPatch
    ],
)
