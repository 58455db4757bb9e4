"""
Kopf's admission forms (its "Admission control" page) that the reviews alone show, in-process.
"""
import pytest

import kopf
from kopf._handlers.registries import OperatorRegistry
from tests.unit.admission.test_handling import review, serve


def fn(**_):
    pass


@pytest.mark.parametrize('option', ['backoff', 'errors', 'retries', 'timeout'])
def test_admission_handlers_take_no_retry_options_as_in_kopf(option):
    with pytest.raises(TypeError):
        kopf.on.validate('kopfexamples', registry=OperatorRegistry(), **{option: 1})(fn)


@pytest.mark.parametrize('error', [kopf.PermanentError("no"), kopf.TemporaryError("no", delay=1), ValueError("no")])
async def test_other_errors_reject_with_the_general_code_500_as_in_kopf(error):
    registry = OperatorRegistry()

    @kopf.on.validate('kopfexamples', registry=registry)
    def check(**_):
        raise error

    response = (await serve(registry, review()))['response']

    assert response['allowed'] is False and response['status']['code'] == 500


async def test_of_several_errors_the_admission_error_is_reported_first_as_in_kopf():
    registry = OperatorRegistry()

    @kopf.on.validate('kopfexamples', registry=registry)
    def broken(**_):
        raise ValueError("unexpected")

    @kopf.on.validate('kopfexamples', registry=registry)
    def temporary(**_):
        raise kopf.TemporaryError("not now")

    @kopf.on.validate('kopfexamples', registry=registry)
    def rejecting(**_):
        raise kopf.AdmissionError("Meh! I do not like it. Change the field.", code=400)

    response = (await serve(registry, review()))['response']

    assert response['status'] == {'code': 400, 'message': "Meh! I do not like it. Change the field."}


def test_a_webhook_server_watches_its_certificate_files_as_in_kopf(tmp_path):
    server = kopf.WebhookServer(certfile=str(tmp_path / 'cert.pem'), pkeyfile=str(tmp_path / 'pkey.pem'),
                                cafile=str(tmp_path / 'ca.pem'), file_check_interval=60)

    assert server.file_check_interval == 60
