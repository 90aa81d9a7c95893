"""A minimal Django project for the tests of ``simpleworkflow.django``: the ``shop`` app
(an ``Order`` model, a workflow that ships an order through the ORM), its databases from
the environment (``SHOP_DATABASE_URL``, and ``SHOP_OTHER_DATABASE_URL`` for a second
alias ``other``), one simpleworkflow store URL each."""
