"""One reader per tool a team keeps its incident history in; each streams `HistoricIncident`s or `Refusal`s."""
