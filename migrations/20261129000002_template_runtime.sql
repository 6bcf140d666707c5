-- A template version may run under a Kubeflow Trainer ClusterTrainingRuntime (a TrainJob);
-- NULL runs it as a JobSet.
ALTER TABLE template_version ADD COLUMN trainer_runtime TEXT;
