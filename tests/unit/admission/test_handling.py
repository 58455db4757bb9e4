"""Answering admission reviews with validating and mutating handlers."""
import base64
import json
import logging

import jsonpatch
import pytest

import kopf
from kopf._admission.handling import serve_admission_request
from kopf._handlers.registries import OperatorRegistry
from kopf._indexing.indexing import OperatorIndexes
from kopf._observability import metrics, recording
from kopf._structs.resources import Resource, Selector
from kopf._structs.reviews import InvalidReviewError
from kopf.config import OperatorConfig

SELECTOR = Selector(name='kopfexamples')
RESOURCE = Resource('kopf.dev', 'v1', 'kopfexamples', 'KopfExample', namespaced=True)
OBJECT = {
    'apiVersion': 'kopf.dev/v1', 'kind': 'KopfExample',
    'metadata': {'name': 'kex1', 'namespace': 'ns1', 'labels': {'app': 'demo'}},
    'spec': {'numbers': [1, 2]},
}


@pytest.fixture()
def registry():
    return OperatorRegistry()


def review(operation='CREATE', obj=OBJECT, old=None, **extra):
    return {
        'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview',
        'request': {
            'uid': 'review-uid',
            'kind': {'group': 'kopf.dev', 'version': 'v1', 'kind': 'KopfExample'},
            'resource': {'group': 'kopf.dev', 'version': 'v1', 'resource': 'kopfexamples'},
            'name': 'kex1', 'namespace': 'ns1', 'operation': operation,
            'userInfo': {'username': 'alice', 'groups': ['devs']},
            'object': obj, 'oldObject': old, 'dryRun': False,
            **extra,
        },
    }


async def serve(registry, payload, **kwargs):
    return await serve_admission_request(payload, registry=registry, resources={SELECTOR: RESOURCE},
                                         config=OperatorConfig(), memo=kopf.Memo(), **kwargs)


def decoded_patch(response):
    assert response['patchType'] == 'JSONPatch'
    return json.loads(base64.b64decode(response['patch']))


async def test_no_handlers_allow_the_request(registry):
    result = await serve(registry, review())
    assert result == {'apiVersion': 'admission.k8s.io/v1', 'kind': 'AdmissionReview',
                      'response': {'uid': 'review-uid', 'allowed': True}}


async def test_an_admission_error_rejects_with_its_message_and_code(registry):
    @kopf.on.validate('kopfexamples', registry=registry)
    def check(spec, **_):
        if len(spec['numbers']) < 3:
            raise kopf.AdmissionError("At least 3 numbers, please.", code=422)

    response = (await serve(registry, review()))['response']
    assert response == {'uid': 'review-uid', 'allowed': False,
                        'status': {'code': 422, 'message': "At least 3 numbers, please."}}


async def test_an_admission_error_without_a_message_names_the_handler(registry):
    @kopf.on.validate('kopfexamples', id='check', registry=registry)
    def check(**_):
        raise kopf.AdmissionError()

    response = (await serve(registry, review()))['response']
    assert response['status'] == {'code': 500, 'message': "Handler 'check' rejected the request."}


async def test_other_exceptions_reject_with_a_message_naming_the_handler(registry, caplog):
    @kopf.on.validate('kopfexamples', id='check', registry=registry)
    async def check(**_):
        raise ValueError("unexpected")

    response = (await serve(registry, review()))['response']
    assert response['allowed'] is False
    assert response['status'] == {'code': 500, 'message': "Handler 'check' failed: ValueError: unexpected"}
    assert any(record.exc_info for record in caplog.records)


async def test_failures_of_tolerant_handlers_allow_the_request(registry, caplog):
    calls = []

    @kopf.on.validate('kopfexamples', id='broken', ignore_failures=True, registry=registry)
    def broken(**_):
        raise kopf.PermanentError("broken")

    @kopf.on.validate('kopfexamples', registry=registry)
    def fine(**_):
        calls.append('fine')

    response = (await serve(registry, review()))['response']
    assert response['allowed'] is True
    assert calls == ['fine']
    assert "Handler 'broken' failed: PermanentError: broken" in caplog.text
    assert "ignore_failures=True" in caplog.text


async def test_admission_errors_reject_even_with_ignore_failures(registry):
    @kopf.on.validate('kopfexamples', ignore_failures=True, registry=registry)
    def check(**_):
        raise kopf.AdmissionError("no")

    assert (await serve(registry, review()))['response']['allowed'] is False


async def test_every_handler_runs_and_the_first_rejection_is_reported(registry):
    calls = []

    @kopf.on.validate('kopfexamples', registry=registry)
    def first(**_):
        calls.append('first')
        raise kopf.AdmissionError("first says no")

    @kopf.on.validate('kopfexamples', registry=registry)
    def second(**_):
        calls.append('second')

    @kopf.on.validate('kopfexamples', registry=registry)
    def third(**_):
        calls.append('third')
        raise kopf.AdmissionError("third says no")

    response = (await serve(registry, review()))['response']
    assert response['status']['message'] == "first says no"
    assert calls == ['first', 'second', 'third']  # as in Kopf: all run, one failure is reported


@pytest.mark.parametrize('errors, reported', [
    ([ValueError("other"), kopf.TemporaryError("temporary")], "temporary"),
    ([kopf.TemporaryError("temporary"), kopf.PermanentError("permanent")], "permanent"),
    ([kopf.PermanentError("permanent"), kopf.AdmissionError("admission", code=400)], "admission"),
    ([ValueError("other"), RuntimeError("another")], "other"),
])
async def test_of_several_failures_the_most_telling_kind_is_reported(registry, errors, reported):
    for index, error in enumerate(errors):
        def fail(error=error, **_):
            raise error
        kopf.on.validate('kopfexamples', id=f'h{index}', registry=registry)(fail)

    response = (await serve(registry, review()))['response']

    assert response['allowed'] is False
    assert reported in response['status']['message']
    assert response['status']['code'] == (400 if reported == 'admission' else 500)


async def test_a_failing_mutation_rejects_and_no_patch_is_returned(registry):
    @kopf.on.mutate('kopfexamples', registry=registry)
    def failing(patch, **_):
        patch.spec['a'] = 1
        raise kopf.PermanentError("no")

    @kopf.on.mutate('kopfexamples', registry=registry)
    def mutating(patch, **_):
        patch.spec['b'] = 2

    response = (await serve(registry, review()))['response']

    assert response['allowed'] is False
    assert 'patch' not in response


async def test_warnings_are_returned_also_with_rejections(registry):
    @kopf.on.validate('kopfexamples', registry=registry)
    def warn(warnings, **_):
        warnings.append("Numbers look odd.")

    @kopf.on.validate('kopfexamples', registry=registry)
    def reject(warnings, **_):
        warnings.append("And short.")
        raise kopf.AdmissionError("rejected")

    response = (await serve(registry, review()))['response']
    assert response['warnings'] == ["Numbers look odd.", "And short."]
    assert response['allowed'] is False


async def test_a_mutation_becomes_a_base64_jsonpatch_that_gives_the_patched_object(registry):
    @kopf.on.mutate('kopfexamples', registry=registry)
    def defaults(spec, patch, **_):
        patch.spec['size'] = 3
        patch.metadata.labels['mutated'] = 'yes'
        patch.metadata.labels['app'] = None  # None removes the key, as in merge-patches

    response = (await serve(registry, review()))['response']
    operations = decoded_patch(response)
    assert jsonpatch.apply_patch(OBJECT, operations) == {
        **OBJECT,
        'metadata': {'name': 'kex1', 'namespace': 'ns1', 'labels': {'mutated': 'yes'}},
        'spec': {'numbers': [1, 2], 'size': 3},
    }
    assert response['allowed'] is True


async def test_mutations_of_several_handlers_are_combined_in_order(registry):
    @kopf.on.mutate('kopfexamples', registry=registry)
    def one(patch, **_):
        patch.spec['a'] = 1
        patch.spec['b'] = 1

    @kopf.on.mutate('kopfexamples', registry=registry)
    def two(patch, **_):
        patch.spec['b'] = 2

    operations = decoded_patch((await serve(registry, review()))['response'])
    assert jsonpatch.apply_patch(OBJECT, operations)['spec'] == {'numbers': [1, 2], 'a': 1, 'b': 2}


async def test_a_failed_tolerant_mutation_contributes_nothing(registry):
    @kopf.on.mutate('kopfexamples', ignore_failures=True, registry=registry)
    def half_done(patch, **_):
        patch.spec['half'] = True
        raise RuntimeError("oops")

    response = (await serve(registry, review()))['response']
    assert response['allowed'] is True
    assert 'patch' not in response


async def test_an_empty_mutation_sends_no_patch(registry):
    @kopf.on.mutate('kopfexamples', registry=registry)
    def nothing(patch, **_):
        patch.spec['numbers'] = [1, 2]  # the same value: no change

    response = (await serve(registry, review()))['response']
    assert 'patch' not in response and 'patchType' not in response


async def test_patches_of_validating_handlers_are_ignored_loudly(registry, caplog):
    @kopf.on.validate('kopfexamples', registry=registry)
    def confused(patch, **_):
        patch.spec['x'] = 1

    response = (await serve(registry, review()))['response']
    assert 'patch' not in response
    assert "is a validating handler; its patch is ignored" in caplog.text


async def test_the_admission_kwargs(registry):
    seen = {}

    @kopf.on.validate('kopfexamples', param='P', registry=registry)
    def check(**kwargs):
        seen.update(kwargs)

    old = {**OBJECT, 'spec': {'numbers': [1]}}
    headers = {'Authorization': 'Bearer x'}
    sslpeer = {'subject': ((('commonName', 'apiserver'),),)}
    await serve(registry, review('UPDATE', old=old, dryRun=True, subResource=None), headers=headers,
                sslpeer=sslpeer)
    assert seen['body'] == OBJECT and seen['new'] == OBJECT and seen['old'] == old
    assert seen['spec'] == OBJECT['spec']
    assert (seen['name'], seen['namespace']) == ('kex1', 'ns1')
    assert seen['labels'] == {'app': 'demo'}
    assert list(seen['diff']) == [('change', ('spec', 'numbers'), [1], [1, 2])]
    assert seen['dryrun'] is True
    assert seen['operation'] == 'UPDATE'
    assert seen['subresource'] is None
    assert seen['resource'] == RESOURCE
    assert seen['userinfo'] == {'username': 'alice', 'groups': ['devs']}
    assert seen['headers'] == headers
    assert seen['sslpeer'] == sslpeer
    assert seen['warnings'] == []
    assert isinstance(seen['patch'], kopf.Patch)
    assert isinstance(seen['memo'], kopf.Memo)
    assert 'settings' not in seen and 'config' not in seen  # resource handlers do not get them, as in Kopf
    assert seen['param'] == 'P'
    assert isinstance(seen['logger'], logging.LoggerAdapter)


async def test_deletions_show_the_old_object_as_the_body(registry):
    seen = {}

    @kopf.on.validate('kopfexamples', registry=registry)
    def check(body, old, new, **_):
        seen.update(body=body, old=old, new=new)

    response = (await serve(registry, review('DELETE', obj=None, old=OBJECT)))['response']
    assert seen == {'body': OBJECT, 'old': OBJECT, 'new': None}
    assert response['allowed'] is True


async def test_the_webhook_id_selects_one_handler(registry):
    calls = []

    @kopf.on.validate('kopfexamples', id='first', registry=registry)
    def first(**_):
        calls.append('first')

    @kopf.on.mutate('kopfexamples', id='second', registry=registry)
    def second(**_):
        calls.append('second')

    await serve(registry, review(), webhook='second')
    assert calls == ['second']


async def test_an_unknown_webhook_id_is_allowed_with_a_warning_in_the_log(registry, caplog):
    @kopf.on.validate('kopfexamples', registry=registry)
    def check(**_):
        raise kopf.AdmissionError("no")

    response = (await serve(registry, review(), webhook='gone'))['response']
    assert response['allowed'] is True
    assert "unknown webhook 'gone'" in caplog.text


async def test_operations_filter_the_handlers(registry):
    calls = []

    @kopf.on.validate('kopfexamples', operation='UPDATE', registry=registry)
    def on_update(**_):
        calls.append('update')

    @kopf.on.validate('kopfexamples', operations=['CREATE', 'DELETE'], registry=registry)
    def on_create_delete(**_):
        calls.append('create-delete')

    await serve(registry, review('CREATE'))
    await serve(registry, review('UPDATE', old=OBJECT))
    assert calls == ['create-delete', 'update']


async def test_subresources_are_served_only_when_asked_for(registry):
    calls = []

    @kopf.on.validate('kopfexamples', registry=registry)
    def main(subresource, **_):
        calls.append(('main', subresource))

    @kopf.on.validate('kopfexamples', subresource='status', registry=registry)
    def status(subresource, **_):
        calls.append(('status', subresource))

    @kopf.on.validate('kopfexamples', subresource='*', registry=registry)
    def any_sub(subresource, **_):
        calls.append(('any', subresource))

    await serve(registry, review('UPDATE', old=OBJECT))
    await serve(registry, review('UPDATE', old=OBJECT, subResource='status'))
    await serve(registry, review('UPDATE', old=OBJECT, subResource='scale'))
    assert calls == [('main', None), ('any', None), ('status', 'status'), ('any', 'status'), ('any', 'scale')]


async def test_label_annotation_and_when_filters_apply(registry):
    calls = []

    @kopf.on.validate('kopfexamples', labels={'app': 'demo'}, registry=registry)
    def labelled(**_):
        calls.append('labelled')

    @kopf.on.validate('kopfexamples', annotations={'x': kopf.PRESENT}, registry=registry)
    def annotated(**_):
        calls.append('annotated')

    @kopf.on.validate('kopfexamples', when=lambda dryrun, **_: dryrun, registry=registry)
    def dry(**_):
        calls.append('dry')

    await serve(registry, review())
    await serve(registry, review(dryRun=True))
    assert calls == ['labelled', 'labelled', 'dry']


async def test_a_failing_when_filter_rejects_naming_the_handler(registry):
    @kopf.on.validate('kopfexamples', id='check', when=lambda **_: 1 / 0, registry=registry)
    def check(**_):
        pass

    response = (await serve(registry, review()))['response']
    assert response['allowed'] is False
    assert response['status']['message'] == "Handler 'check' failed: ZeroDivisionError: division by zero"


async def test_handlers_of_other_resources_do_not_run(registry):
    @kopf.on.validate('pods', registry=registry)
    def pods(**_):
        raise kopf.AdmissionError("pods only")

    assert (await serve(registry, review()))['response']['allowed'] is True


async def test_the_review_version_of_the_request_is_answered(registry):
    payload = {**review(), 'apiVersion': 'admission.k8s.io/v1beta1'}
    assert (await serve(registry, payload))['apiVersion'] == 'admission.k8s.io/v1beta1'


async def test_an_invalid_review_raises_for_the_server_to_answer_400(registry):
    with pytest.raises(InvalidReviewError):
        await serve(registry, {'kind': 'Something'})


async def test_admission_handlers_and_their_filters_get_the_indexes(registry):
    seen = []
    kopf.index('pods', id='pod_names', registry=registry)(lambda name, **_: name)

    @kopf.on.validate('kopfexamples', when=lambda pod_names, **_: seen.append(('when', pod_names)) or True,
                      registry=registry)
    def check(pod_names, **_):
        seen.append(('handler', pod_names))

    indexes = OperatorIndexes(registry)
    await serve(registry, review(), indexes=indexes)
    assert seen == [('when', indexes['pod_names']), ('handler', indexes['pod_names'])]


async def test_admission_handlers_with_field_filters(registry):
    seen = []
    kopf.on.validate('kopfexamples', field='spec.numbers', value=[1, 2], registry=registry)(
        lambda **_: seen.append('exact'))
    kopf.on.validate('kopfexamples', field='spec.missing', registry=registry)(lambda **_: seen.append('present'))
    kopf.on.mutate('kopfexamples', id='m', field='spec.numbers', value=lambda value, **_: len(value) == 2,
                   registry=registry)(lambda **_: seen.append('callable'))
    await serve(registry, review())
    assert sorted(seen) == ['callable', 'exact']
    assert sorted(h.id for _, h in registry.iter_admission_handlers()) == [
        'm/spec.numbers', 'test_admission_handlers_with_field_filters.<locals>.<lambda>/spec.missing',
        'test_admission_handlers_with_field_filters.<locals>.<lambda>/spec.numbers']


async def test_transformation_functions_of_mutating_handlers_go_into_the_json_patch(registry):
    @kopf.on.mutate('kopfexamples', registry=registry)
    def append_number(patch, **_):
        patch.spec['field'] = 'x'
        patch.fns.append(lambda body: body['spec']['numbers'].append(3))

    response = (await serve(registry, review()))['response']

    assert response['allowed'] is True
    assert jsonpatch.apply_patch(OBJECT, decoded_patch(response))['spec'] == {'numbers': [1, 2, 3], 'field': 'x'}
    assert OBJECT['spec'] == {'numbers': [1, 2]}  # the review's object itself is left as it came


async def test_a_failing_transformation_function_rejects_the_mutation(registry):
    @kopf.on.mutate('kopfexamples', registry=registry)
    def broken(patch, **_):
        patch.fns.append(lambda body: body['spec']['missing'].append(3))

    response = (await serve(registry, review()))['response']

    assert response['allowed'] is False
    assert "KeyError: 'missing'" in response['status']['message']


async def test_with_namespace_patterns_objects_of_namespaces_not_served_are_admitted_untouched(registry):
    @kopf.on.validate('kopfexamples', registry=registry)
    def refuse(**_):
        raise kopf.AdmissionError("refused")

    elsewhere = await serve(registry, review(), served=lambda namespace: namespace == 'ns2')
    assert elsewhere['response'] == {'uid': 'review-uid', 'allowed': True}
    served = await serve(registry, review(), served=lambda namespace: namespace == 'ns1')
    assert served['response']['allowed'] is False


async def test_every_handlers_answer_is_recorded_by_its_outcome(registry):
    @kopf.on.validate('kopfexamples', id='fine', registry=registry)
    def fine(**_):
        pass

    @kopf.on.validate('kopfexamples', id='refusing', registry=registry)
    def refusing(**_):
        raise kopf.AdmissionError("no")

    @kopf.on.validate('kopfexamples', id='tolerated', ignore_failures=True, registry=registry)
    def tolerated(**_):
        raise ValueError("oops")

    @kopf.on.validate('kopfexamples', id='broken', registry=registry)
    def broken(**_):
        raise ValueError("oops")

    recorder = metrics.MetricsRecorder(process=False)
    token = recording.install(recorder)
    try:
        await serve(registry, review())
    finally:
        recording.uninstall(token)
    answers = {outcome: recorder.registry.get_sample_value('kopf_webhook_requests_total',
                                                           {'handler': handler, 'outcome': outcome})
               for handler, outcome in [('fine', 'allowed'), ('refusing', 'rejected'),
                                        ('tolerated', 'ignored_failure'), ('broken', 'failed')]}
    assert answers == {'allowed': 1, 'rejected': 1, 'ignored_failure': 1, 'failed': 1}
