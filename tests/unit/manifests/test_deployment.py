"""The Deployment of the options: the command line, replicas and strategy, probes and ports, the budget."""
from kopf._manifests import deployment
from kopf._manifests.deployment import Options


def options(**overrides):
    return Options(**{'name': 'op', 'namespace': 'ops', 'image': 'op:1', 'paths': ('op.py',), **overrides})


def container(opts):
    return deployment.deployment(opts)['spec']['template']['spec']['containers'][0]


def test_a_standalone_operator_is_one_replica_never_two_at_once():
    made = deployment.deployment(options(namespaces=('a', 'b')))
    assert made['spec']['replicas'] == 1
    assert made['spec']['strategy'] == {'type': 'Recreate'}
    assert container(options(namespaces=('a', 'b')))['command'] == ['kopf', 'run', '/app/op.py', '-n', 'a', '-n', 'b']
    assert made['spec']['template']['spec']['serviceAccountName'] == 'op'
    assert deployment.disruption_budget(options()) is None


def test_ha_replicas_keep_one_up_and_shards_lose_one_at_a_time():
    ha, shards = options(mode='ha'), options(mode='shards', replicas=3)
    assert deployment.deployment(ha)['spec']['replicas'] == 2
    assert deployment.deployment(shards)['spec']['replicas'] == 3
    assert container(ha)['command'] == ['kopf', 'run', '/app/op.py', '-A', '--ha']
    assert deployment.disruption_budget(ha)['spec']['minAvailable'] == 1
    assert deployment.disruption_budget(shards)['spec']['maxUnavailable'] == 1


def test_the_liveness_endpoint_is_a_port_and_a_probe():
    made = container(options(liveness='http://0.0.0.0:8080/healthz'))
    assert made['ports'] == [{'name': 'liveness', 'containerPort': 8080}]
    assert made['livenessProbe']['httpGet'] == {'path': '/healthz', 'port': 'liveness'}
    assert made['command'][-2:] == ['--liveness', 'http://0.0.0.0:8080/healthz']
    assert 'ports' not in container(options())


def test_webhooks_on_a_fixed_port_get_a_port_and_a_service():
    made = container(options(webhook_port=9443))
    assert made['ports'] == [{'name': 'webhooks', 'containerPort': 9443}]
    assert deployment.service(options(webhook_port=9443))['spec']['ports'][0]['targetPort'] == 'webhooks'
    assert deployment.service(options()) is None


def test_the_dockerfile_installs_the_framework_with_the_extras_and_runs_the_command():
    text = deployment.dockerfile(options(extras=('typed',)), sources=['op.py'])
    assert 'RUN pip install --no-cache-dir "$(ls /tmp/kopf-*.whl)[typed]"' in text
    assert 'COPY op.py /app/op.py' in text
    assert 'USER 65532:65532' in text
    assert text.endswith('CMD ["kopf", "run", "/app/op.py", "-A"]\n')


def test_the_metrics_are_a_port_and_readiness_is_probed_beside_liveness_else_beside_the_metrics():
    shared = container(options(liveness='http://0.0.0.0:8080/healthz', metrics='http://0.0.0.0:8080/metrics'))
    assert shared['ports'] == [{'name': 'liveness', 'containerPort': 8080}]  # one port serves both
    assert shared['readinessProbe']['httpGet'] == {'path': '/readyz', 'port': 'liveness'}
    assert shared['command'][-2:] == ['--metrics', 'http://0.0.0.0:8080/metrics']
    alone = container(options(metrics='http://0.0.0.0:9090/metrics'))
    assert alone['ports'] == [{'name': 'metrics', 'containerPort': 9090}]
    assert alone['readinessProbe']['httpGet'] == {'path': '/readyz', 'port': 'metrics'}
    assert 'livenessProbe' not in alone
