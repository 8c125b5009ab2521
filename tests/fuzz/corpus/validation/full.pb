
Once upon a timeх"млL?(33s? *0:client-1@J

JThe end