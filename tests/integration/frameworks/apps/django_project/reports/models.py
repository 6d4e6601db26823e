from django.db import models


class Report(models.Model):
    day = models.CharField(max_length=10, unique=True)
    fence = models.IntegerField()
