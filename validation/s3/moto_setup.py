"""Prepares a moto S3 server for pail's tests: creates the bucket and an IAM
user with an access key allowed everything, then prints "KEY SECRET". Run with
moto's INITIAL_NO_AUTH_ACTION_COUNT=4 so that every later request is
authenticated (signature and access key checked by moto itself)."""
import sys

import boto3

endpoint, bucket = sys.argv[1], sys.argv[2]
kw = dict(endpoint_url=endpoint, region_name="us-east-1",
          aws_access_key_id="AKIASETUP0000000000", aws_secret_access_key="setup")
boto3.client("s3", **kw).create_bucket(Bucket=bucket)                        # action 1
iam = boto3.client("iam", **kw)
iam.create_user(UserName="pail-test")                                        # action 2
key = iam.create_access_key(UserName="pail-test")["AccessKey"]               # action 3
iam.put_user_policy(UserName="pail-test", PolicyName="all",                  # action 4
                    PolicyDocument='{"Version":"2012-10-17","Statement":'
                                   '[{"Effect":"Allow","Action":"*","Resource":"*"}]}')
print(key["AccessKeyId"], key["SecretAccessKey"])
