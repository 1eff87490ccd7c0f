from django.db import models


class Invoice(models.Model):
    customer = models.CharField(max_length=200, db_index=True)
    amount_cents = models.PositiveIntegerField()

    def __str__(self) -> str:
        return f"{self.customer}: {self.amount_cents}"
