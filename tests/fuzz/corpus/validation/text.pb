
Once upon a time