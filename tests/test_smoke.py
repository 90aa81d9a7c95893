from simpleworkflow import Client, RunStatus


def test_start_and_get(client: Client) -> None:
    run = client.start("content.thumbnail.v1", {"content_id": "c_1"})
    assert client.get(run.id).status is RunStatus.PENDING
    assert [e.event_type for e in client.events(run.id)] == ["created"]
