"""Small helpers with no project knowledge: redaction, file limits, sentence splitting."""
