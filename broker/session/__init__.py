"""Client sessions: a consumer session and a producer session, written once for every
front end (the binary protocol, the WebSocket API, the HTTP consumer routes and the
virtual-time clients). A front end only translates its wire format into calls on these
objects and their results back; a behaviour fixed here is fixed for all of them.

Layer: above ``broker.dispatch`` (subscriptions, dispatchers, the service), below
``broker.http`` and ``broker.protocol``. Nothing here knows a wire format.

- :mod:`broker.session.consumer`: hand-over (the cache's ``released`` event), permits and
  receiver queues, redelivery, acks, nacks, seek, unsubscribe, a reader's subscription.
- :mod:`broker.session.acks`: what a batch-index ack leaves unacknowledged.
- :mod:`broker.session.message_ids`: message ids as every client names them.
- :mod:`broker.session.options`: the spelling of a client's options (booleans).
- :mod:`broker.session.payload`: what a message may be (size, key).
- :mod:`broker.session.producer`: topic membership, sequence ids, the write queue.
"""
